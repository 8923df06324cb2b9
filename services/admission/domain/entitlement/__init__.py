"""Entitlement engine (placeholder docstring)."""

from services.admission.domain.entitlement.compute import EntitlementEngine, compute_entitlements
from services.admission.domain.entitlement.model import (
    Alert,
    JobDemand,
    LeafUsage,
    PoolEntitlement,
    PoolInput,
    TreeEntitlements,
    TreeInput,
)

__all__ = [
    "Alert",
    "EntitlementEngine",
    "JobDemand",
    "LeafUsage",
    "PoolEntitlement",
    "PoolInput",
    "TreeEntitlements",
    "TreeInput",
    "compute_entitlements",
]
