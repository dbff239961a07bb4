// TEMPORARY (session 17, to be removed after bench/kube.ts's same-run A/B): `old: true` queues a
// new pool member's first pass as before (no `echo`: it starts at once after a lull).
export const refillEchoAb = { old: false };
