// The peer of `tfd serve` in test/bench/serve_bench.sh: a small Node.js HTTP server answering TF
// Serving's row-format :predict with onnxruntime-node on the same model.onnx, one intra-op thread.
// It tries the graph optimisation levels, keeps the fastest at batch 1, and prints which.
//   node serve_ort_peer.js MODEL.onnx PORT
const http = require('http');
const ort = require('onnxruntime-node');

async function pickSession(path, features) {
  const x = new ort.Tensor('float32', new Float32Array(features).fill(0.5), [1, features]);
  let best = null;
  for (const level of ['all', 'extended', 'basic']) {
    const options = {intraOpNumThreads: 1, interOpNumThreads: 1, executionMode: 'sequential', graphOptimizationLevel: level};
    const session = await ort.InferenceSession.create(path, options);
    for (let i = 0; i < 200; ++i) await session.run({input: x});
    const start = process.hrtime.bigint();
    for (let i = 0; i < 2000; ++i) await session.run({input: x});
    const us = Number(process.hrtime.bigint() - start) / 2000 / 1000;
    console.error(`ort peer: graphOptimizationLevel ${level}: ${us.toFixed(1)} us per batch-1 run`);
    if (!best || us < best.us) best = {us, level, session};
  }
  console.error(`ort peer: kept graphOptimizationLevel ${best.level}, intraOpNumThreads 1, sequential`);
  return best.session;
}

async function main() {
  const [path, port] = process.argv.slice(2);
  const features = 784;  // the benchmark's MNIST-shaped dnn
  const session = await pickSession(path, features);
  http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', async () => {
      try {
        const rows = JSON.parse(Buffer.concat(chunks).toString()).instances;
        const x = new Float32Array(rows.length * features);
        rows.forEach((r, i) => x.set(r.flat(2), i * features));
        const out = await session.run({input: new ort.Tensor('float32', x, [rows.length, features])});
        const k = out.logits.dims[1];
        const predictions = rows.map((_, i) => ({logits: Array.from(out.logits.data.subarray(i * k, (i + 1) * k)),
                                                 probabilities: Array.from(out.probabilities.data.subarray(i * k, (i + 1) * k))}));
        res.writeHead(200, {'Content-Type': 'application/json'});
        res.end(JSON.stringify({predictions}));
      } catch (e) {
        res.writeHead(400, {'Content-Type': 'application/json'});
        res.end(JSON.stringify({error: String(e)}));
      }
    });
  }).listen(Number(port), '127.0.0.1', () => console.error(`ort peer: listening on ${port}`));
}
main();
