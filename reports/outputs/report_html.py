"""report.html: the self-contained precision report (harness.reports.html)."""
from harness.reports.outputs import OutputFormat, register


def write(data, path) -> None:
    from harness.reports.html import render_report
    render_report(data, path)


def prepare() -> None:
    """The report's imports (matplotlib, jinja2) and matplotlib's font list: a third of a quick
    run's time on the CPU when they load after the sweep."""
    import harness.reports.html  # noqa: F401
    from matplotlib import font_manager
    font_manager.findfont("DejaVu Sans")


REPORT_HTML = register(OutputFormat("report", "report.html", write, prepare=prepare))
