"""The checklist's rules, one module per topic.

Each rule is one function registered with :func:`dsmon.health.registry.rule`;
:data:`dsmon.health.registry.RULE_MODULES` lists the modules in the order the checklist shows them.
"""
