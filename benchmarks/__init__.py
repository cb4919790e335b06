"""`make bench`: measured speed of the coordinator against a floor server and librdkafka's mock cluster.

Every figure is a ratio against a baseline measured in the same run; see docs/performance.md.
"""
