"""Running the pieces together, for the CLI and the benchmarks alike: a real Flower deployment
on loopback (deploy_local), Flower's own processes and `flwr run` (flower_processes), a run
submitted to a remote SuperLink (remote_run), and a workload replayed against a live device
agent over MQTT (replay)."""
