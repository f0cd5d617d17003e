"""The federated learning task both Flower apps share, the way Flower's app templates share one
task module between ClientApp and ServerApp: the real offline datasets and their partitions
(data), the multitask CNN (model), training in microbatches and accuracy (trainer), the
server's held-out evaluation (evaluation), the run configuration (config) and the conversions
to and from Flower's records (records)."""
