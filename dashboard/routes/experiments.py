"""The Experiments page as Streamlit runs it (dashboard/app.py registers this file); the page is
dashboard.views.experiments."""

from dashboard.config import DashboardConfig
from dashboard.views import experiments

experiments.render(DashboardConfig.from_env())
