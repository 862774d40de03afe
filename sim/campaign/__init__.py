"""Design campaigns: thousands of simulations from one file, resumable, on a process pool or on Dask.

- ``spec``: the campaign file (``collsched.campaign/1``, TOML, JSON or YAML), its axes, their expansion into
  configurations and each one's key (``Campaign``, ``Config``, ``load_campaign``, ``check_cap``);
- ``simulate``: one configuration simulated as ``collsched sweep`` simulates one run (``simulate_config``);
- ``store``: the SQLite store, written as results arrive (``Store``);
- ``executors``: the local process pool and the Dask executor (``run_pool``, ``run_dask``);
- ``run``: the campaign run: what is missing, the estimate and refusal, the execution (``run_campaign``);
- ``report``: winners, runner-ups, margins and efficiencies, heatmaps and CSV (``load_report``);
- ``table``: the backend policy's tuning table from the winners (``tuning_table``);
- ``command``: ``collsched campaign``.

This package sits above ``sim.cli`` (it reuses the commands' one-run helpers); ``sim.cli.app`` lists
``command`` by its full name. Importing the package imports no numpy, simpy, networkx or dask.
"""

from __future__ import annotations

from sim.lazy import lazy_exports

__getattr__ = lazy_exports(__name__, {
    "CAMPAIGN_FORMAT": "spec", "Campaign": "spec", "CampaignError": "spec", "Config": "spec",
    "check_cap": "spec", "load_campaign": "spec", "parse_campaign": "spec",
    "simulate_config": "simulate", "Store": "store", "run_pool": "executors", "run_dask": "executors",
    "CampaignRefused": "run", "run_campaign": "run", "load_report": "report", "heatmaps": "report",
    "write_csv": "report", "tuning_table": "table", "write_table": "table",
})
__all__ = ["CAMPAIGN_FORMAT", "Campaign", "CampaignError", "CampaignRefused", "Config", "Store", "check_cap",
           "heatmaps", "load_campaign", "load_report", "parse_campaign", "run_campaign", "run_dask", "run_pool",
           "simulate_config", "tuning_table", "write_csv", "write_table"]
