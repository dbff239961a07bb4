/** @jsxImportSource hono/jsx */
// The console's page frame: a skip link, a navigation bar, one stylesheet (dark text on white,
// contrast ≥ 7:1 for text, visible focus rings), and tables that scroll sideways on a phone.
import type { Child } from "hono/jsx";
import { raw } from "hono/html";

const CSS = `
*{box-sizing:border-box}
body{font:16px/1.5 system-ui,sans-serif;margin:0;color:#111;background:#fff}
a{color:#0645ad}
:focus-visible{outline:3px solid #b35c00;outline-offset:2px}
.skip{position:absolute;left:-999px}.skip:focus{left:1rem;top:1rem;background:#fff;padding:.5rem}
header{background:#1d2b3a;color:#fff;padding:.5rem 1rem;display:flex;flex-wrap:wrap;gap:1rem;align-items:center}
header a{color:#fff}
nav ul{display:flex;flex-wrap:wrap;gap:1rem;list-style:none;margin:0;padding:0}
main{padding:1rem;max-width:70rem}
.scroll{overflow-x:auto}
table{border-collapse:collapse;margin:.5rem 0 1rem;min-width:100%}
caption{text-align:left;font-weight:600}
th,td{border-bottom:1px solid #bbb;padding:.35rem .5rem;text-align:left;vertical-align:top}
.ok{color:#0a5c1a}.bad{color:#a00000}
button,input,select{font:inherit;padding:.4rem .6rem;min-height:2.5rem}
button.danger{background:#a00000;color:#fff;border:0;border-radius:4px}
form.inline{display:inline}
.filters{display:flex;flex-wrap:wrap;gap:1rem;align-items:end}
.filters label{display:flex;flex-direction:column}
.notice{padding:.5rem;border:2px solid #0a5c1a;margin:.5rem 0}
.error{padding:.5rem;border:2px solid #a00000;margin:.5rem 0}
ol.timeline{padding-left:1.25rem}
.bar-p50{fill:#1f5fa8}.bar-p95{fill:#b35c00}
.chart-label,.chart-value{font-size:12px;fill:#111}
`;

export function Page(props: { title: string; who?: string; csrf?: string; children: Child }) {
  return (
    <html lang="en">
      <head>
        <meta charset="utf-8" />
        <meta name="viewport" content="width=device-width, initial-scale=1" />
        <title>{props.title} · sandbox console</title>
        <style>{raw(CSS)}</style>
        <script src="/console/live.js" defer></script>
      </head>
      <body>
        <a class="skip" href="#main">Skip to content</a>
        <header>
          <strong>Sandbox console</strong>
          {props.who !== undefined && (
            <nav aria-label="Console">
              <ul>
                <li><a href="/console">Overview</a></li>
                <li><a href="/console/sandboxes">Sandboxes</a></li>
                <li><a href="/console/ops">Update ops</a></li>
                <li>{props.who}</li>
                <li>
                  <form class="inline" method="post" action="/console/logout">
                    <input type="hidden" name="csrf" value={props.csrf} />
                    <button type="submit">Sign out</button>
                  </form>
                </li>
              </ul>
            </nav>
          )}
        </header>
        <main id="main" tabindex={-1}>
          <h1>{props.title}</h1>
          {props.children}
        </main>
      </body>
    </html>
  );
}

/** A section refreshed in place by live.js every few seconds from `src` (the same page, fragment=id). */
export function Live(props: { id: string; label: string; src: string; children: Child }) {
  return (
    <section aria-labelledby={`${props.id}-h`}>
      <h2 id={`${props.id}-h`}>{props.label}</h2>
      <div id={props.id} class="scroll" data-live={props.src}>{props.children}</div>
    </section>
  );
}

export function LoginPage(props: { error?: string }) {
  return (
    <Page title="Sign in">
      {props.error && <p class="error" role="alert">{props.error}</p>}
      <form method="post" action="/console/login">
        <p>
          <label for="key">API key (the admin key, or a team's key)</label><br />
          <input id="key" name="key" type="password" autocomplete="off" required size={48} />
        </p>
        <button type="submit">Sign in</button>
      </form>
    </Page>
  );
}

/**
 * Polls each [data-live] section's fragment. Each section runs its own loop: the next poll is
 * timed from the end of the previous one, so a slow answer never overlaps a second request for
 * the same section (an edge under load is not asked twice as often); a request unanswered after
 * `TIMEOUT` is aborted. A failed poll (no answer, a 5xx) doubles the section's delay up to `MAX`,
 * and the first good answer brings it back to `PERIOD`. A hidden tab sends nothing: its pending
 * polls are cancelled, and the tab polls again as soon as it is shown. A region holding the focus
 * is left alone (checked again when the answer comes): replacing it would drop a keyboard user's
 * place or a half-typed value. A 401 (the session ended) goes to the login form.
 */
export const LIVE_JS = `
(function(){
  var PERIOD=3000,MAX=60000,TIMEOUT=20000;
  function busy(el){return el.contains(document.activeElement)&&document.activeElement!==document.body}
  function section(el){
    var delay=PERIOD,timer=null,inflight=false;
    function later(ms){clearTimeout(timer);timer=setTimeout(poll,ms)}
    function poll(){
      timer=null;
      if(document.hidden||inflight)return;
      if(busy(el)){later(PERIOD);return}
      inflight=true;
      var ctl=new AbortController(),guard=setTimeout(function(){ctl.abort()},TIMEOUT);
      fetch(el.getAttribute('data-live'),{credentials:'same-origin',headers:{'x-console-fragment':'1'},signal:ctl.signal})
        .then(function(r){
          if(r.status===401){location.href='/console/login';return null}
          if(!r.ok)throw new Error('fragment '+r.status);
          return r.text();
        })
        .then(function(t){
          delay=PERIOD;
          if(t===null||busy(el))return;
          el.innerHTML=t;el.setAttribute('data-updated',String(Date.now()));
        },function(){delay=Math.min(delay*2,MAX)})
        .then(function(){clearTimeout(guard);inflight=false;if(!document.hidden)later(delay)});
    }
    return{
      // The page itself was just rendered: the first poll waits a period.
      start:function(){if(!document.hidden)later(PERIOD)},
      wake:function(){if(!inflight&&timer===null)later(delay===PERIOD?0:delay)},
      sleep:function(){clearTimeout(timer);timer=null}
    };
  }
  var all=Array.prototype.map.call(document.querySelectorAll('[data-live]'),section);
  all.forEach(function(s){s.start()});
  document.addEventListener('visibilitychange',function(){all.forEach(function(s){if(document.hidden)s.sleep();else s.wake()})});
})();
`;
