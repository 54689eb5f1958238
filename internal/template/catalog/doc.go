// Package catalog says what a Debian template is: a Definition (suite,
// mirror, variant, packages, shell steps, host files, resources), its
// validation and its cache key, and the built-in templates (base,
// code-interpreter-v1) with Lookup and Names. It is its own package
// because it is pure data and rules, with no file system or process: the
// CLI lists and looks up templates through it, and package template builds
// what it describes.
package catalog
