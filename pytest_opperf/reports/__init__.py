"""Renderers (pure): the terminal report, markdown, the Chrome trace, GPU readings, the pull request
comment, fitting text to a width."""
