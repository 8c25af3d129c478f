#!/usr/bin/env node
// Times an ONNX model under ONNX Runtime's CPU execution provider
// (onnxruntime-node, pinned in bench/package.json; install it with
// `bash scripts/install-ort.sh`), for comparison with `kiln run --benchmark`.
//
//   node bench/ort_compare.js model.onnx --shape data=256,1,28,28 --calls 20 --threads 2
//
// Every input of the model gets a float32 tensor of the given shape (--shape
// NAME=D0,D1,..., once per input; uniform values in [-1, 1) from a fixed
// seed). The session uses intraOpNumThreads=--threads, interOpNumThreads=1,
// sequential execution and every graph optimization ORT has ("all"). One
// warm-up call (--warmup N for more), then --calls timed calls, each
// awaited. Prints `name value unit` lines, as `kiln run --benchmark` does:
// ort_latency_ms_p50, ort_latency_ms_p90, ort_latency_ms_min,
// ort_throughput_items_per_s (rows of the first input per second).
'use strict';

const ort = require('onnxruntime-node');

function usage(message) {
  console.error(`ort_compare.js: ${message}`);
  console.error('usage: node bench/ort_compare.js MODEL.onnx --shape NAME=D0,D1,... [--calls N] [--warmup N] [--threads N]');
  process.exit(2);
}

function parseArgs(argv) {
  const opt = { model: null, shapes: [], calls: 20, warmup: 1, threads: 2 };
  for (let i = 0; i < argv.length; ++i) {
    const a = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) usage(`${a} needs a value`);
      return argv[++i];
    };
    if (a === '--shape') opt.shapes.push(value());
    else if (a === '--calls') opt.calls = Number(value());
    else if (a === '--warmup') opt.warmup = Number(value());
    else if (a === '--threads') opt.threads = Number(value());
    else if (a.startsWith('--')) usage(`unknown option ${a}`);
    else if (opt.model === null) opt.model = a;
    else usage(`unexpected argument ${a}`);
  }
  if (opt.model === null) usage('give the model file');
  for (const k of ['calls', 'warmup', 'threads'])
    if (!Number.isInteger(opt[k]) || opt[k] < (k === 'warmup' ? 0 : 1)) usage(`--${k} must be a positive integer`);
  const shapes = new Map();
  for (const text of opt.shapes) {
    const eq = text.indexOf('=');
    const dims = eq > 0 ? text.slice(eq + 1).split(',').map(Number) : [];
    if (eq <= 0 || dims.length === 0 || !dims.every((d) => Number.isInteger(d) && d > 0))
      usage(`--shape '${text}': expected NAME=D0,D1,... with positive dims`);
    shapes.set(text.slice(0, eq), dims);
  }
  opt.shapes = shapes;
  return opt;
}

// A small linear congruential generator: the same inputs on every run.
function uniformFloats(count, seed) {
  const out = new Float32Array(count);
  let s = seed >>> 0;
  for (let i = 0; i < count; ++i) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    out[i] = s / 2147483648 - 1;
  }
  return out;
}

function percentile(sorted, p) {
  return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))];
}

async function main() {
  const opt = parseArgs(process.argv.slice(2));
  const session = await ort.InferenceSession.create(opt.model, {
    executionProviders: ['cpu'],
    intraOpNumThreads: opt.threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    graphOptimizationLevel: 'all',
  });
  const feeds = {};
  let rows = 1;
  session.inputNames.forEach((name, k) => {
    const dims = opt.shapes.get(name);
    if (dims === undefined) usage(`the model takes input '${name}': give --shape ${name}=D0,D1,...`);
    if (k === 0) rows = dims[0];
    feeds[name] = new ort.Tensor('float32', uniformFloats(dims.reduce((a, b) => a * b, 1), 42 + k), dims);
  });
  for (const name of opt.shapes.keys())
    if (!session.inputNames.includes(name)) usage(`the model has no input '${name}' (inputs: ${session.inputNames.join(', ')})`);

  for (let i = 0; i < opt.warmup; ++i) await session.run(feeds);
  const ms = [];
  for (let i = 0; i < opt.calls; ++i) {
    const t0 = process.hrtime.bigint();
    await session.run(feeds);
    ms.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  const sorted = [...ms].sort((a, b) => a - b);
  const total = ms.reduce((a, b) => a + b, 0);
  const g = (x) => Number(x.toPrecision(4));
  console.log(`ort_latency_ms_p50 ${g(percentile(sorted, 0.5))} ms`);
  console.log(`ort_latency_ms_p90 ${g(percentile(sorted, 0.9))} ms`);
  console.log(`ort_latency_ms_min ${g(sorted[0])} ms`);
  console.log(`ort_throughput_items_per_s ${g((rows * opt.calls) / (total / 1000))} items/s`);
  await session.release();
}

main().catch((e) => {
  console.error(`ort_compare.js: ${e.message || e}`);
  process.exit(1);
});
