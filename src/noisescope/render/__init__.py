"""Renderers: terminal tables, Markdown/CSV/JSON exports, plots, HTML reports.

Conversion of integer nanoseconds to readable units happens here only.
"""
