"""Trace readers and the writer of the generic `time_s,task` format."""

from workloads.traces._io import DEFAULT_TASK_NAMES, read_once
from workloads.traces.azure_functions import FUNCTION_MAPPINGS, read_azure_functions_csv
from workloads.traces.azure_llm import LLMRequests, read_azure_llm_csv, read_azure_llm_requests
from workloads.traces.load import TRACE_FORMATS, bundled_azure_conv, detect_format, load_trace
from workloads.traces.time_task import read_time_task_csv, write_time_task_csv

__all__ = [
    "DEFAULT_TASK_NAMES",
    "FUNCTION_MAPPINGS",
    "TRACE_FORMATS",
    "LLMRequests",
    "bundled_azure_conv",
    "detect_format",
    "load_trace",
    "read_azure_functions_csv",
    "read_azure_llm_csv",
    "read_azure_llm_requests",
    "read_once",
    "read_time_task_csv",
    "write_time_task_csv",
]
