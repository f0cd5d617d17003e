"""The Datacenter page as Streamlit runs it (dashboard/app.py registers this file); the page is
dashboard.views.datacenter."""

from dashboard.config import DashboardConfig
from dashboard.views import datacenter

datacenter.render(DashboardConfig.from_env())
