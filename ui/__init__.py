"""The dashboard's Streamlit code that every page shares: the page frame, live fragments, charts.

``dsmon/`` computes and never imports Streamlit; ``app.py`` and ``pages/`` render. What the
pages would otherwise each copy (finding the view ``app.py`` prepared, the live fragment that
refreshes the run's frames before redrawing, charts drawn under stable keys, user text shown
as text) lives here once.
"""
