// E2B's network.rules grammar (schema/egress/transforms.ts): host keys, header names and values,
// and the secrets the values name.
import { expect, it } from "vitest";
import { normalizeTransforms, transformErrors, transformSecrets } from "../../../schema/egress/transforms.ts";

it("accepts exact and leading-wildcard hosts with token headers, and lists the secrets named", () => {
  const rules = { "API.GitHub.com": [{ transform: { headers: { Authorization: "Bearer ${e2b.secrets.GH}", "X-Trace": "1" } } }], "*.openai.com": [{ transform: { headers: { "x-key": "${e2b.secrets.oai}${e2b.secrets.gh}" } } }] };
  expect(transformErrors(rules)).toEqual([]);
  expect(Object.keys(normalizeTransforms(rules))).toEqual(["api.github.com", "*.openai.com"]);
  expect(transformSecrets(rules)).toEqual(["gh", "oai"]);
});

it("names each bad host, header name and value", () => {
  expect(
    transformErrors({
      "*": [],
      "10.0.0.0/8": [],
      "a.*.com": [],
      "ok.test": [{ transform: { headers: { "bad name": "v", Host: "evil.test", "x-a": "line\r\nInjected: 1", "x-b": "v".repeat(8193) } } }],
    }),
  ).toEqual([
    'rules: "*" is not a domain name or a leading-wildcard pattern (*.example.com)',
    'rules: "10.0.0.0/8" is not a domain name or a leading-wildcard pattern (*.example.com)',
    'rules: "a.*.com" is not a domain name or a leading-wildcard pattern (*.example.com)',
    'rules["ok.test"] header "bad name": not a valid header name',
    'rules["ok.test"] header "Host": the proxy sets this header itself',
    'rules["ok.test"] header "x-a": the value has a line break or NUL',
    'rules["ok.test"] header "x-b": the value is longer than 8192 bytes',
  ]);
});
