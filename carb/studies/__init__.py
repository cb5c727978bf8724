"""Published protocols and analyses, kept apart from the product's path.

- :mod:`~carb.studies.analyses`: batch scaling, cross-device transfer, importances, fronts.
- :mod:`~carb.studies.help_fbnet`: HELP's FBNet protocol (few-shot latency transfer).
- :mod:`~carb.studies.nb201`: NAS-Bench-201 on edge devices (HELP's protocol, batch scaling).
- :mod:`~carb.studies.fewshot`: either protocol from K measurements, as ``carb fewshot`` runs it.
"""
