"""Node-side collectors: tail DeepSpeed logs, poll NVML, send records to the dashboard."""
