"""Everything about DeepSpeed's configs, from reading one to knowing each release's schema.

Which config a run used, its sections and flags (:mod:`~dsmon.ds_config.read`); what every
DeepSpeed release reads, generated from its source (:mod:`~dsmon.ds_config.releases`); the
schema and defaults of one release (:mod:`~dsmon.ds_config.schema`); the optimizer and scheduler
names that exist (:mod:`~dsmon.ds_config.names`); a config read with DeepSpeed's defaults filled
in (:mod:`~dsmon.ds_config.effective`).
"""
