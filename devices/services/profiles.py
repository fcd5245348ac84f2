"""Device profiles and their endpoint catalogue. A profile belongs to one organisation (or to
none: a global profile), and its name is unique there, so a taken name tells a caller only
about names they can see. An endpoint is checked here once, for the API and any later caller
alike: a writable endpoint names the RPC method that writes it, an enum lists its values, a
number's bounds are in order, a safe value is one the endpoint accepts, keys are unique in
a profile. Adding endpoints to a profile gives every device of the profile the new endpoints
in the same transaction."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from django.db import IntegrityError, transaction

from common.audit.writes import audited_bulk_create, audited_update
from common.json_types import JsonValue
from common.models import Organization
from devices.models import (
    DEFAULT_EXPECTED_INTERVAL_S,
    DeviceProfile,
    DeviceProfileEndpoint,
    EndpointDataType,
)
from devices.services.provisioning import ProvisioningRefused, profile_endpoints_sync
from devices.values import value_has_type, value_violation

MAX_ENDPOINTS_PER_PROFILE = 200


@dataclass(frozen=True)
class EndpointSpec:
    """One catalogue entry as a caller describes it."""

    key: str
    data_type: str
    writable: bool = False
    min_value: float | None = None
    max_value: float | None = None
    allowed_values: list[JsonValue] | None = None
    rpc_method: str = ""
    rpc_param_key: str = ""
    unit: str = ""  # what a number counts, shown after it ("°C")
    safe_value: JsonValue = None  # a writable endpoint's fallback when a run-time limit ends


def endpoint_spec_problems(spec: EndpointSpec) -> dict[str, str]:
    """What is wrong with ``spec``, per field (empty: nothing). Pure: no database."""
    problems: dict[str, str] = {}
    if spec.writable and not spec.rpc_method:
        problems["rpc_method"] = "a writable endpoint needs the RPC method that writes it"
    if spec.data_type != EndpointDataType.NUMBER:
        for name in ("min_value", "max_value"):
            if getattr(spec, name) is not None:
                problems[name] = "only a number endpoint has bounds"
    elif (
        spec.min_value is not None
        and spec.max_value is not None
        and spec.min_value > spec.max_value
    ):
        problems["max_value"] = "must not be below min_value"
    allowed = spec.allowed_values
    if spec.data_type == EndpointDataType.ENUM and not allowed:
        problems["allowed_values"] = "an enum endpoint lists its allowed values"
    elif allowed is not None:
        problem = _allowed_values_problem(spec.data_type, allowed)
        if problem:
            problems["allowed_values"] = problem
    if spec.safe_value is not None:
        problem = _safe_value_problem(spec)
        if problem:
            problems["safe_value"] = problem
    return problems


# Why a safe value is refused, by the reason ``value_violation`` gives.
_SAFE_VALUE_VIOLATIONS = {
    "value_wrong_type": "must be a value of the endpoint's type ({data_type})",
    "value_out_of_range": "must be within min_value and max_value",
    "value_not_allowed": "must be one of allowed_values",
}


def _safe_value_problem(spec: EndpointSpec) -> str | None:
    """A safe value is written when a run-time limit ends, so it must pass the very checks
    the safety gates make on every command; a read-only endpoint has nothing to fall back."""
    if not spec.writable:
        return "only a writable endpoint has a safe value"
    violation = value_violation(spec, spec.safe_value)
    if violation is None:
        return None
    return _SAFE_VALUE_VIOLATIONS[violation].format(data_type=spec.data_type)


def _allowed_values_problem(data_type: str, allowed: list[JsonValue]) -> str | None:
    if data_type == EndpointDataType.BOOL:
        return "a bool endpoint takes no allowed values"
    if not isinstance(allowed, list) or not allowed:
        return "must be a non-empty list"
    if not all(value_has_type(data_type, value) for value in allowed):
        return f"every value must be of the endpoint's type ({data_type})"
    if len({repr(value) for value in allowed}) != len(allowed):
        return "values must be distinct"
    return None


def _endpoints_add(profile: DeviceProfile, specs: Sequence[EndpointSpec]) -> None:
    """Insert the entries (a key the profile already has is refused), then the devices'."""
    keys = [spec.key for spec in specs]
    taken = set(
        DeviceProfileEndpoint.objects.filter(profile=profile, key__in=keys).values_list(
            "key", flat=True
        )
    )
    if taken or len(set(keys)) != len(keys):
        repeated = sorted(taken or {k for k in keys if keys.count(k) > 1})
        raise ProvisioningRefused("endpoints", f"duplicate endpoint key(s): {', '.join(repeated)}")
    if DeviceProfileEndpoint.objects.filter(profile=profile).count() + len(specs) > (
        MAX_ENDPOINTS_PER_PROFILE
    ):
        raise ProvisioningRefused(
            "endpoints", f"a profile has at most {MAX_ENDPOINTS_PER_PROFILE} endpoints"
        )
    audited_bulk_create(
        DeviceProfileEndpoint,
        [
            DeviceProfileEndpoint(profile=profile, **_with_param_key(spec).__dict__)
            for spec in specs
        ],
    )
    profile_endpoints_sync(profile=profile)


def _with_param_key(spec: EndpointSpec) -> EndpointSpec:
    """A writable endpoint's RPC parameter is named as the endpoint unless the caller says
    otherwise: without one, every command to it would be refused as ``binding_invalid``."""
    if spec.writable and not spec.rpc_param_key:
        return replace(spec, rpc_param_key=spec.key)
    return spec


def _checked(specs: Sequence[EndpointSpec]) -> None:
    for spec in specs:
        problems = endpoint_spec_problems(spec)
        if problems:
            field, message = next(iter(problems.items()))
            raise ProvisioningRefused("endpoints", f"{spec.key}: {field}: {message}")


def profile_create(
    *,
    organization: Organization | None,
    name: str,
    endpoints: Sequence[EndpointSpec],
    expected_interval_s: int = DEFAULT_EXPECTED_INTERVAL_S,
) -> DeviceProfile:
    """A profile of ``organization`` (None: a global one) with its catalogue, in one
    transaction; a name the organisation (or the global profiles) already has is refused."""
    _checked(endpoints)
    try:
        with transaction.atomic():
            profile = DeviceProfile.objects.create(
                organization=organization, name=name, expected_interval_s=expected_interval_s
            )
            _endpoints_add(profile, endpoints)
    except IntegrityError:
        raise _name_taken(organization.pk if organization else None) from None
    return profile


def _name_taken(organization_id: int | None) -> ProvisioningRefused:
    where = "among the global profiles" if organization_id is None else "in its organisation"
    return ProvisioningRefused("name", f"a profile of this name exists {where}")


def profile_rename(*, profile: DeviceProfile, name: str) -> DeviceProfile:
    """A new name, unique within the profile's organisation (or among the global ones)."""
    try:
        with transaction.atomic():
            audited_update(DeviceProfile.objects.filter(pk=profile.pk), name=name)
    except IntegrityError:
        raise _name_taken(profile.organization_id) from None
    profile.name = name
    return profile


def profile_endpoints_add(
    *, profile: DeviceProfile, endpoints: Sequence[EndpointSpec]
) -> DeviceProfile:
    """Extend the catalogue; every device of the profile gets the new endpoints at once."""
    _checked(endpoints)
    with transaction.atomic():
        DeviceProfile.objects.select_for_update().filter(pk=profile.pk).first()
        _endpoints_add(profile, endpoints)
    return profile
