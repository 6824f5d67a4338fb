"""The folder ``dsmon run`` puts on the job's ``PYTHONPATH``: it holds only ``sitecustomize``."""
