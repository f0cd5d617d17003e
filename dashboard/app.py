"""The DART-FL monitoring dashboard (Streamlit). Start it with `dartfl dashboard`.

Thin: Streamlit's multipage navigation, one URL per page (/, /device, /fl-rounds,
/experiments, /datacenter), each page a script in dashboard/routes that renders its view
(dashboard/views); data access in dashboard/data, settings from the environment.
"""

from __future__ import annotations

import streamlit as st

from dashboard.config import DashboardConfig

# An emoji favicon is a data URL; a ":material/...:" one is fetched from a font CDN.
st.set_page_config(page_title="DART-FL dashboard", page_icon="📡", layout="wide")
PAGES = [
    st.Page("routes/fleet.py", title="Fleet", url_path="fleet", default=True),
    st.Page("routes/device.py", title="Device", url_path="device"),
    st.Page("routes/rounds.py", title="FL rounds", url_path="fl-rounds"),
    st.Page("routes/experiments.py", title="Experiments", url_path="experiments"),
    st.Page("routes/datacenter.py", title="Datacenter", url_path="datacenter"),
]
page = st.navigation(PAGES)
cfg = DashboardConfig.from_env()
with st.sidebar:
    st.caption(f"run store: `{cfg.store_path}`")
    st.caption(f"broker: `{cfg.broker_url or 'none'}`")
page.run()
