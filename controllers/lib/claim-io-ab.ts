// TEMPORARY (session 15, removed after its measurement): switches the claim's writes and the
// runtime /init back to the code before the change, so bench/kube.ts can measure old and new in
// the same rounds (its `kubeOld` step; bench/kube-agent.ts's `ab` op flips it).
export const claimIoAb = { old: false };
