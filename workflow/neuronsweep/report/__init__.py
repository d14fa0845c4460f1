"""The report's parts: plotly figures and the self-contained HTML page they sit in."""
