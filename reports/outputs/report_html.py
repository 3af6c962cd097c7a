"""report.html: the self-contained precision report (harness.reports.html)."""
from harness.reports.outputs import OutputFormat, register


def write(data, path) -> None:
    from harness.reports.html import render_report
    render_report(data, path)


REPORT_HTML = register(OutputFormat("report", "report.html", write))
