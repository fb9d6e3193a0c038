// ONNX Runtime (npm onnxruntime-node) on a tfd model.onnx, for the export test and the prediction
// benchmark. Inputs are raw float32 rows, little-endian, in a file (ROWS x FEATURES).
//
//   node ort_run.js run MODEL INPUT ROWS FEATURES OUTDIR
//     runs the whole input as one batch (one thread), writes OUTDIR/<output name>.f32 for each
//     output and prints {"inputs": [...], "outputs": [...]} (the session's names) on stdout.
//   node ort_run.js bench MODEL INPUT ROWS FEATURES BATCH SECONDS
//     rows/s of session.run over the input in batches of BATCH, one intra-op and one inter-op
//     thread, graph optimization 'all', for each execution mode and memory-arena setting (its
//     users' choices); prints one line per setting and then "best ROWS_PER_S SETTING".
//
// onnxruntime-node is looked for under ORT_NODE_MODULES, else third_party/onnxruntime-node
// (scripts/fetch_onnxruntime.sh); exit 77 with one line when it is not there.
'use strict';
const fs = require('fs');
const path = require('path');

function loadOrt() {
  const dirs = [process.env.ORT_NODE_MODULES, path.join(__dirname, '..', '..', 'third_party', 'onnxruntime-node', 'node_modules')];
  for (const d of dirs) {
    if (d && fs.existsSync(path.join(d, 'onnxruntime-node'))) return require(path.join(d, 'onnxruntime-node'));
  }
  console.error('skipped: onnxruntime-node not found (run scripts/fetch_onnxruntime.sh)');
  process.exit(77);
}

function readRows(file, rows, features) {
  const buf = fs.readFileSync(file);
  if (buf.length !== rows * features * 4) throw new Error(`${file}: ${buf.length} bytes, expected ${rows} x ${features} float32`);
  return new Float32Array(buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.length));
}

function options(mode, arena) {
  return {intraOpNumThreads: 1, interOpNumThreads: 1, graphOptimizationLevel: 'all', executionMode: mode,
          enableCpuMemArena: arena, enableMemPattern: arena};
}

async function run(ort, [model, input, rows, features, outDir]) {
  rows = Number(rows), features = Number(features);
  const session = await ort.InferenceSession.create(model, options('sequential', true));
  const x = new ort.Tensor('float32', readRows(input, rows, features), [rows, features]);
  const out = await session.run({[session.inputNames[0]]: x});
  for (const name of session.outputNames) {
    const t = out[name];
    fs.writeFileSync(path.join(outDir, `${name}.f32`), Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength));
  }
  console.log(JSON.stringify({inputs: session.inputNames, outputs: session.outputNames}));
}

// Rows/s of one setting: batches cut from the input in turn (their tensors made once, as a server
// reusing its buffers would), warmed up, then timed for `seconds`.
async function measure(ort, model, data, rows, features, batch, seconds, mode, arena) {
  const session = await ort.InferenceSession.create(model, options(mode, arena));
  const name = session.inputNames[0];
  const feeds = [];
  for (let r = 0; r + batch <= rows; r += batch)
    feeds.push({[name]: new ort.Tensor('float32', data.subarray(r * features, (r + batch) * features), [batch, features])});
  for (let i = 0; i < Math.min(feeds.length, 20); ++i) await session.run(feeds[i]);
  let done = 0;
  const start = process.hrtime.bigint();
  let elapsed = 0;
  while (elapsed < seconds) {
    await session.run(feeds[done % feeds.length]);
    ++done;
    elapsed = Number(process.hrtime.bigint() - start) / 1e9;
  }
  await session.release();
  return (done * batch) / elapsed;
}

async function bench(ort, [model, input, rows, features, batch, seconds]) {
  rows = Number(rows), features = Number(features), batch = Number(batch), seconds = Number(seconds);
  const data = readRows(input, rows, features);
  let best = {rate: 0, setting: '-'};
  for (const mode of ['sequential', 'parallel'])
    for (const arena of [true, false]) {
      const rate = await measure(ort, model, data, rows, features, batch, seconds, mode, arena);
      const setting = `${mode}${arena ? '+arena' : ''}`;
      console.log(`setting ${setting} ${rate.toFixed(1)}`);
      if (rate > best.rate) best = {rate, setting};
    }
  console.log(`best ${best.rate.toFixed(1)} ${best.setting}`);
}

(async () => {
  const [cmd, ...args] = process.argv.slice(2);
  const ort = loadOrt();
  if (cmd === 'run' && args.length === 5) await run(ort, args);
  else if (cmd === 'bench' && args.length === 6) await bench(ort, args);
  else {
    console.error('usage: ort_run.js run MODEL INPUT ROWS FEATURES OUTDIR | bench MODEL INPUT ROWS FEATURES BATCH SECONDS');
    process.exit(2);
  }
})().catch((e) => {
  console.error(`ort_run.js: ${e.message}`);
  process.exit(1);
});
