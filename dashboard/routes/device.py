"""The Device page as Streamlit runs it (dashboard/app.py registers this file); the page is
dashboard.views.device."""

from dashboard.config import DashboardConfig
from dashboard.views import device

device.render(DashboardConfig.from_env())
