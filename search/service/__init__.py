"""The workflows, as library functions: index, status, search, mask, select/label/dupes/unique,
export, embed/build-index, optimize, pull.

The CLI (search/cli) and the web app (search/web) both call these and only parse options and
render results; each workflow module returns typed results with ``to_dict()`` that follow a
JSON schema in schemas/. One module per workflow; shared rules (the engine dispatch, the
missing-extra error) live in one place here too.
"""

# `wherein serve`'s default, here because that command's module must import light (no service).
DEFAULT_PREFETCH_MASKS = 4  # masks made ahead after a search: about the first row of hits
