"""summary.csv: harness.reports.summary.summarize of the results."""
from harness.references.atomic import atomic_write
from harness.reports.outputs import OutputFormat, register


def write(data, path) -> None:
    with atomic_write(path, "w") as f:
        f.write(data.summary.to_csv(index=False))


SUMMARY_CSV = register(OutputFormat("summary", "summary.csv", write))
