# shellcheck shell=sh
# Sourced by the images' RUN steps that install packages (bind-mounted, never copied into a layer): the
# build machine's settings arrive as build secrets, files under /run/secrets that no layer keeps.
#   ca-bundle  a PEM bundle pip and uv trust (a TLS-intercepting proxy's CA); absent: their defaults.
#   index-env  KEY=VALUE lines, PIP_* and UV_* only (index URLs, which may carry tokens); absent: PyPI.
# `make images` writes both (images/index_env.py); `docker build` without them builds against PyPI.
# BUILD_SECRETS: another folder than /run/secrets (the tests).
build_secrets=${BUILD_SECRETS:-/run/secrets}
if [ -s "$build_secrets/ca-bundle" ]; then
    export SSL_CERT_FILE="$build_secrets/ca-bundle" PIP_CERT="$build_secrets/ca-bundle"
fi
if [ -s "$build_secrets/index-env" ]; then
    while IFS= read -r line || [ -n "$line" ]; do
        key=${line%%=*}
        case "$line" in
        '' | '#'*) ;;
        *=*)
            # A PIP_/UV_ line, NAME=value, is exported as it is, never evaluated.
            # shellcheck disable=SC2163
            case "$key" in
            *[!A-Za-z0-9_]*) echo "build-env: ignored an index-env line (not NAME=value)" >&2 ;;
            PIP_?* | UV_?*) export "$line" ;;
            *) echo "build-env: ignored index-env key $key (only PIP_* and UV_*)" >&2 ;;
            esac
            ;;
        *) echo "build-env: ignored index-env line without '='" >&2 ;;
        esac
    done <"$build_secrets/index-env"
fi
