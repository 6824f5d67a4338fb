"""Plotly figure builders: a frame from ``dsmon.analysis`` in, a ``go.Figure`` out.

Kept apart from Streamlit so the same figures serve the dashboard, the benchmark and tests,
and so a test can assert on trace names and values without a browser. Builders never query
or compute statistics: they draw what they are given, downsampled upstream.
"""
