"""Bursty workload generators and real-trace readers, all producing `dartfl.arrivals.Arrivals`.

    rng = numpy.random.default_rng(1)
    arrivals = workloads.generate("mmpp", duration_s=600, rate_per_s=50,
                                  task_names=("digits", "fashion"), rng=rng, zipf=1.0)
    trace = workloads.load_trace("trace.csv")
    busy = workloads.rescale_to_load(trace, profile, 0.7)

See docs/workloads.md for the generators' parameters and the trace formats.
"""

from workloads.mix import TaskMix
from workloads.registry import GENERATOR_NAMES, generate, generate_times, generator_params
from workloads.rescale import capacity_for, offered_load, rate_for_load, rescale_to_load, scale_to_rate
from workloads.stats import WorkloadSummary, binned_counts, summarize
from workloads.traces import (
    DEFAULT_TASK_NAMES,
    FUNCTION_MAPPINGS,
    TRACE_FORMATS,
    LLMRequests,
    bundled_azure_conv,
    detect_format,
    load_trace,
    read_azure_functions_csv,
    read_azure_llm_csv,
    read_azure_llm_requests,
    read_time_task_csv,
    write_time_task_csv,
)

__all__ = [
    "DEFAULT_TASK_NAMES",
    "FUNCTION_MAPPINGS",
    "GENERATOR_NAMES",
    "TRACE_FORMATS",
    "LLMRequests",
    "TaskMix",
    "WorkloadSummary",
    "binned_counts",
    "bundled_azure_conv",
    "capacity_for",
    "detect_format",
    "generate",
    "generate_times",
    "generator_params",
    "load_trace",
    "offered_load",
    "rate_for_load",
    "read_azure_functions_csv",
    "read_azure_llm_csv",
    "read_azure_llm_requests",
    "read_time_task_csv",
    "rescale_to_load",
    "scale_to_rate",
    "summarize",
    "write_time_task_csv",
]
