"""The graph layer: logical graph, chaining into a job graph, the execution plan, key groups."""
