"""Helpers for linking Debian's system libraries shared or static."""

def dynamic_linkopts(libs):
    """Linker flags used only in the default (shared) build."""
    return select({
        "//third_party:static": [],
        "//conditions:default": libs,
    })

def static_deps():
    """The static link group, pulled in only by --config=static."""
    return select({
        "//third_party:static": ["//third_party:static_group"],
        "//conditions:default": [],
    })
