"""Organisations and their members over the API. A member reads the organisation's rows; an
admin also writes them (farms, devices, profiles, members); a superuser may do everything. The
last admin of an organisation cannot be removed or demoted by an admin, so an organisation is
never left without someone who can manage it."""
