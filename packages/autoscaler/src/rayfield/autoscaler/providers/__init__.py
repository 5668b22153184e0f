"""The cloud providers: ``aws`` (:mod:`.aws`, bootstrap in :mod:`.aws_bootstrap`), ``gcp``
(:mod:`.gcp`) and ``kubernetes`` (:mod:`.kubernetes`).

Each module imports its cloud's client library (the extras ``[aws]``, ``[gcp]``,
``[kubernetes]``) only when a provider of that type is built, so that importing
``rayfield.autoscaler`` needs none of them. The client each cloud's provider shares with
its bootstrap (or exec runner) is in a small module of its own: :mod:`.aws_api`,
:mod:`.gcp_api`, :mod:`.kubernetes_api`.
:func:`~rayfield.autoscaler.node_provider.get_node_provider` picks the class by ``provider.type``.
"""
