"""The fast cycle-approximate system model: step timing, the CDU reduction and its compiled
twin, workloads and traces, serving metrics. It imports neither tricut.rtl nor the harnesses."""
