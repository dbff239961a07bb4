// TEMPORARY (session 16, to be removed after bench/kube.ts's same-run A/B): `old: true` writes a
// claim's relabel 20 ms after it, as before controllers/drivers/kubernetes/claim-writes.ts.
export const claimWriteAb = { old: false };
