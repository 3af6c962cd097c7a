"""Reports: results.csv / summary.csv tables and the self-contained HTML precision report."""
