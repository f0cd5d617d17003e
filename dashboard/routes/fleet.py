"""The Fleet page as Streamlit runs it (dashboard/app.py registers this file); the page is
dashboard.views.fleet."""

from dashboard.config import DashboardConfig
from dashboard.views import fleet

fleet.render(DashboardConfig.from_env())
