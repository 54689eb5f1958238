// Package oci pulls OCI and Docker images from a registry and unpacks their
// layers into a directory, so a template can start from an image instead of
// a Debian suite.
//
// Pull resolves a reference to the image of one platform (linux/amd64 by
// default), downloads the config and layer blobs into a cache directory
// keyed by digest (a second pull of the same image downloads only
// manifests) and returns an Image. Unpack applies the layers in order to a
// directory: OCI whiteouts are honoured, ownership, modes and hard links are
// kept, device nodes are skipped, and no entry can write outside the
// directory: every parent path is resolved by the kernel (openat2 with
// RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS), so a layer can neither name
// "../x" nor reach through a symlink it or an earlier layer planted. The
// decompressed size is capped.
//
// Cache layout:
//
//	<cache>/blobs/sha256/<hex>   verified config and layer blobs, as served
//	<cache>/blobs/.tmp-*         downloads in progress
package oci
