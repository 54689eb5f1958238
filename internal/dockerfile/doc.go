// Package dockerfile turns a Dockerfile into the steps of E2B's template
// build API (the request body of POST /v2/templates/{id}/builds/{buildID},
// see internal/build.Spec), so that `moat template build --dockerfile`
// sends exactly what the official SDKs send for Template.fromDockerfile.
// It exists apart from the CLI so that the translation, which decides what
// a user's Dockerfile means inside Moat, is tested on its own (table tests
// and FuzzParse) and never touches the network or the filesystem.
//
// The syntax is parsed by BuildKit's own parser
// (github.com/moby/buildkit/frontend/dockerfile/{parser,instructions}):
// line continuations, comments, JSON and shell forms, flags and escape
// directives behave exactly as in `docker build`. Variables are expanded
// by BuildKit's shell lexer with Docker's scoping: ARG before FROM for
// FROM only, ARG and ENV in the stage for the instructions after them;
// $PATH is Docker's default PATH until an ENV sets it (the base's own
// environment is not known here).
//
// The mapping, per instruction:
//
//	FROM img|template      the base (the caller decides whether it names a template)
//	RUN cmd | RUN ["a",…]  RUN step (JSON form shell-quoted); ARG values are exported
//	                       in front of the command, as Docker puts them in RUN's env
//	COPY/ADD src… dest     one COPY step per source (files from the context dir);
//	                       --chown user, --chmod octal; ADD of a local tar archive
//	                       is a COPY plus a RUN that unpacks it
//	ENV k=v …              ENV step; ARG k[=v] only for expansion and RUN
//	WORKDIR, USER          WORKDIR and USER steps
//	CMD, ENTRYPOINT        the start command (Docker's ENTRYPOINT+CMD rules)
//	EXPOSE, VOLUME, LABEL, STOPSIGNAL, MAINTAINER  accepted, no effect
//
// Like the SDK's parser, the steps start as root in / (Docker's defaults)
// and end with USER user and WORKDIR /home/user unless the Dockerfile set
// them, so that sandboxes run as E2B's default user.
//
// Refused with an error naming the line, before anything is sent:
// multi-stage builds and COPY --from, ADD of URLs or git repositories,
// heredocs, RUN --mount/--network/--security, COPY --parents/--exclude,
// SHELL, HEALTHCHECK, ONBUILD, numeric or group USER values, sources
// outside the context directory.
package dockerfile
