// Package deploy holds Moat's deployment manifests and the tests that keep
// them true to the moat binary: systemd units in systemd/, Kubernetes
// objects in kubernetes/ (docs/deploy.md). A manifest is read by no Go
// code, so nothing else would notice when a flag it passes is renamed or
// an object it refers to is missing; the tests decode every Kubernetes
// manifest strictly into its k8s.io/api type, check that the objects refer
// only to each other, and check every flag and MOAT_* variable the
// manifests give moat against `moat <command> --help` of a binary built
// from this tree. The package has no code of its own.
package deploy
