"""The DART-FL monitoring dashboard (Streamlit). Start it with `dartfl dashboard`.

Thin: settings from the environment (dashboard.config), one page per module in
dashboard/views, data access in dashboard/data.py.
"""

from __future__ import annotations

import streamlit as st

from dashboard.config import DashboardConfig
from dashboard.views import datacenter, device, experiments, fleet, rounds

PAGES = {
    "Fleet": fleet.render,
    "Device": device.render,
    "FL rounds": rounds.render,
    "Experiments": experiments.render,
    "Datacenter": datacenter.render,
}

st.set_page_config(page_title="DART-FL dashboard", page_icon=":material/hub:", layout="wide")
cfg = DashboardConfig.from_env()
with st.sidebar:
    st.header("DART-FL")
    page = st.radio("page", list(PAGES), key="page", label_visibility="collapsed")
    st.caption(f"run store: `{cfg.store_path}`")
    st.caption(f"broker: `{cfg.broker_url or 'none'}`")
PAGES[page](cfg)
