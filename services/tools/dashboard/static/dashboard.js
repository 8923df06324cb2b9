// The poolwise dashboard: polls /api/overview and draws it. No build step, no framework.
"use strict";

const POLL_MS = 1000;
const NUMBERS = ["reservation", "limit", "entitlement", "allocation", "demand"];
const SLACK = ["slack_entitlement", "slack_allocation", "slack_demand"];
const QUEUES = ["non_preemptible", "controller", "revocable", "pending"];
// The pools opened by a click in a large tree (the API collapses a tree of more than 100 pools
// below depth 2: /api/overview?expand=...); kept across polls.
const expanded = new Set();
let pending = null;  // the next poll's timer

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined) continue;
    if (name === "class") node.className = value;
    else node.setAttribute(name, value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(typeof child === "string" || typeof child === "number" ? String(child) : child);
  }
  return node;
}

function amount(value) {
  if (value === undefined || value === null) return "-";
  if (!isFinite(value)) return "\u221e";
  return Math.abs(value - Math.round(value)) < 1e-9 ? String(Math.round(value)) : value.toFixed(2);
}

function depth(path) {
  return path === "/" ? 0 : path.split("/").length - 1;
}

// One kind of one pool: a bar per number, scaled to `scale` (the largest of the pool's numbers of that kind).
function kindBars(pool, kind, values, scale) {
  const rows = el("div", {class: "bars"});
  rows.append(el("div", {class: "kind"}, kind));
  for (const number of NUMBERS) {
    const value = values[number];
    const width = scale > 0 && isFinite(value) ? Math.min(100, (100 * value) / scale) : (isFinite(value) ? 0 : 100);
    rows.append(el("div", {class: `bar ${number}`},
      el("span", {class: "label"}, number),
      el("span", {class: "track"}, el("span", {class: "fill", style: `width:${width}%`})),
      el("span", {class: "value", "data-kind": kind, "data-number": number}, amount(value))));
  }
  const slack = SLACK.filter((n) => values[n]);
  if (slack.length) {
    rows.append(el("div", {class: "slack"}, "slack: " + slack.map((n) => `${n.slice(6)} ${amount(values[n])}`).join(", ")));
  }
  return rows;
}

function poolRow(tree, pool, capacity) {
  const status = pool.starvation.status;
  const row = el("div", {class: `pool ${status}`, "data-tree": tree.tree, "data-pool": pool.path,
                         style: `margin-left:${(depth(pool.path) - 1) * 1.4}em`});
  const badge = status === "ok" ? null : el("span", {class: `badge ${status}`}, status.replace(/_/g, " "));
  let toggle = null;
  if (pool.collapsed) {
    toggle = el("button", {class: "toggle", type: "button", "data-toggle": pool.path}, `+ ${pool.below} pools below`);
  } else if (expanded.has(pool.path) && !pool.leaf) {
    toggle = el("button", {class: "toggle", type: "button", "data-toggle": pool.path}, "\u2212 fold");
  }
  row.append(el("div", {class: "pool-head"}, el("strong", {}, pool.path), pool.leaf ? el("span", {class: "tag"}, "leaf") : null, badge, toggle));
  const kinds = el("div", {class: "kinds"});
  for (const [kind, values] of Object.entries(pool.kinds)) {
    if (!capacity[kind] && NUMBERS.every((n) => !values[n])) continue;  // a kind no host has and nobody uses
    kinds.append(kindBars(pool, kind, values, Math.max(...NUMBERS.map((n) => values[n] || 0))));
  }
  row.append(kinds);
  return row;
}

function queueView(tree, leaf, queues) {
  const box = el("div", {class: "leaf-queues", "data-tree": tree.tree, "data-leaf": leaf}, el("h4", {}, leaf));
  for (const name of QUEUES) {
    const queue = queues[name] || {length: 0, gangs: []};
    const list = el("ol", {class: "gangs"});
    for (const gang of queue.gangs) {
      const why = gang.why ? gang.why.summary : "";
      list.append(el("li", {class: "gang", "data-gang": gang.gang},
        el("span", {class: "gang-id"}, gang.gang),
        el("span", {class: "gang-size"}, ` ${gang.members}/${gang.size} tasks, priority ${gang.priority}`),
        why ? el("div", {class: "why"}, why) : null));
    }
    const more = queue.length > queue.gangs.length ? el("div", {class: "more"}, `and ${queue.length - queue.gangs.length} more`) : null;
    box.append(el("div", {class: "queue", "data-queue": name}, el("span", {class: "queue-name"}, `${name} (${queue.length})`), list, more));
  }
  return box;
}

function treeView(tree) {
  const capacity = tree.capacity || {};
  const section = el("section", {class: "tree", "data-tree": tree.tree},
    el("h2", {}, `tree ${tree.tree}`,
      el("small", {}, ` policy ${tree.policy || "-"}, capacity ${Object.entries(capacity).map(([k, v]) => `${k}=${amount(v)}`).join(", ") || "none"}`)));
  const pools = el("div", {class: "pools"});
  for (const pool of tree.pools) {
    pools.append(poolRow(tree, pool, capacity));
  }
  if (!tree.pools.length) pools.append(el("p", {class: "empty"}, "no pools yet"));
  const total = tree.total ?? tree.pools.length;
  const shown = total > tree.pools.length ? el("small", {class: "shown"}, ` ${tree.pools.length} of ${total} shown: open a pool to see its children`) : null;
  section.append(el("h3", {}, "Pools", shown), pools);
  const leaves = Object.entries(tree.queues);
  section.append(el("h3", {}, "Queues"));
  if (!leaves.length && !tree.hidden_queues) section.append(el("p", {class: "empty"}, "no gang waits in a queue"));
  for (const [leaf, queues] of leaves) section.append(queueView(tree, leaf, queues));
  if (tree.hidden_queues) section.append(el("p", {class: "more"}, `and ${tree.hidden_queues} more leaves with gangs waiting (open their pools)`));
  return section;
}

function timelineItem(entry) {
  const when = entry.time ? entry.time.replace("T", " ").slice(0, 23) : "";
  return el("li", {class: `event ${entry.type}`, "data-seq": entry.seq},
    el("span", {class: "seq"}, `#${entry.seq}`), el("span", {class: "when"}, when), el("span", {class: "text"}, entry.text));
}

function preemptionItem(record) {
  const when = new Date(record.time * 1000).toISOString().replace("T", " ").slice(0, 23);
  return el("li", {class: "event preemption"}, el("span", {class: "when"}, when),
    el("span", {class: "text"}, `${record.pool}: ${record.tasks.length} tasks of ${record.gang} (${record.state}): ${record.reason}`));
}

function replace(id, nodes) {
  const target = document.getElementById(id);
  target.replaceChildren(...nodes);
}

function draw(data) {
  document.getElementById("position").textContent = `log position ${data.log_seq ?? "-"}` +
    (data.as_of !== null && data.as_of !== undefined ? ` (admission at ${data.as_of})` : "");
  document.getElementById("position").dataset.seq = data.log_seq ?? "";
  document.getElementById("refreshed").textContent = data.refreshed ? `read ${data.refreshed.slice(11, 19)} UTC` : "";
  replace("errors", Object.entries(data.errors || {}).map(([part, why]) => el("div", {class: "error"}, `${part}: ${why}`)));
  replace("trees", data.trees.map(treeView));
  replace("timeline", data.timeline.length ? data.timeline.map(timelineItem) : [el("li", {class: "empty"}, "nothing decided yet")]);
  replace("preemptions", data.preemptions.length ? data.preemptions.map(preemptionItem) : [el("li", {class: "empty"}, "no preemptions")]);
}

async function poll() {
  clearTimeout(pending);
  const live = document.getElementById("live");
  try {
    const query = expanded.size ? "?expand=" + encodeURIComponent([...expanded].join(",")) : "";
    const response = await fetch("/api/overview" + query, {cache: "no-store"});
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    draw(await response.json());
    live.textContent = "live";
    live.className = "live ok";
  } catch (exc) {
    live.textContent = `not answering (${exc.message}); retrying`;
    live.className = "live down";
  }
  clearTimeout(pending);
  pending = setTimeout(poll, POLL_MS);
}

// A click on a pool's toggle opens or folds it, and asks again at once.
document.getElementById("trees").addEventListener("click", (event) => {
  const button = event.target.closest("[data-toggle]");
  if (!button) return;
  const path = button.dataset.toggle;
  if (expanded.has(path)) {
    for (const open of [...expanded]) if (open === path || open.startsWith(path + "/")) expanded.delete(open);
  } else {
    expanded.add(path);
  }
  poll();
});

poll();
