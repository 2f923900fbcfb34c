"""Synthetic benchmark results for the tests of the figures that show them (test data, not
measurements): import them with ``from synthetic import memory_report``."""


def memory_report(rows):
    """A synthetic flash_memory.json: ``rows`` of (n, naive, tiled), each (counted, rss) in MiB."""
    mib = 2**20

    def counts(counted, rss):
        return {"counted_bytes": counted * mib, "rss_bytes": rss * mib}

    results = [
        {"seq_len": n, "naive": counts(*naive), "tiled": counts(*tiled), "outputs_agree": True}
        for n, naive, tiled in rows
    ]
    environment = {"date_utc": "2024-01-02T03:04:05", "machine": "test", "torch": "0"}
    return {"environment": environment, "results": results}
