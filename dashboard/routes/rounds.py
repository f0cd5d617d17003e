"""The FL rounds page as Streamlit runs it (dashboard/app.py registers this file); the page is
dashboard.views.rounds."""

from dashboard.config import DashboardConfig
from dashboard.views import rounds

rounds.render(DashboardConfig.from_env())
