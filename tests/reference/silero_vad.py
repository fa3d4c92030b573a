"""Reference for models/vad/silero_vad: the real silero_vad.onnx run by a small numpy
interpreter of ONNX graphs, not by a re-implementation of the network. It executes the file's
nodes as they are (the If on `sr` and the nested Ifs the exporter wrote for LSTMCell's
batch handling, the STFT conv, the LSTM op with ONNX's gate order), so it is an independent
check of the C++ code, which is written from the network's description.

    silero_vad.py --out DIR --onnx silero_vad.onnx --input IN.safetensors [--batch]

IN holds 16 kHz recordings, one f32 tensor [num_samples] per name. Each is run as upstream's
OnnxWrapper runs it: 512-sample windows in order (the last zero-padded), each with the
previous window's last 64 samples before it (zeros at first), the state carried from a zero
start. DIR/reference.safetensors gets, per name: "<name>.probs" [W], "<name>.h" and
"<name>.c" [W, 128] (the state after each window). With --batch the recordings (which must
then have the same number of windows) run as one batch of streams, as the graph allows.

Computation is float64 throughout (weights are read as float32 and widened), so the
reference carries no rounding of its own at the C++ test's 1e-4 bound.
"""

import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from prism_ref import cli, hf_dir, safetensors_io  # noqa: E402

WINDOW = 512
CONTEXT = 64
SAMPLE_RATE = 16000

FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16}
NP_OF_ONNX = {
    onnx.TensorProto.FLOAT: np.float64,  # widened: see the module docstring
    onnx.TensorProto.DOUBLE: np.float64,
    onnx.TensorProto.INT64: np.int64,
    onnx.TensorProto.INT32: np.int32,
    onnx.TensorProto.BOOL: np.bool_,
}


def _tensor(proto):
    a = numpy_helper.to_array(proto)
    return a.astype(np.float64) if proto.data_type in FLOAT_TYPES else a


def _attrs(node):
    out = {}
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            out[a.name] = a.g
        elif a.type == onnx.AttributeProto.TENSOR:
            out[a.name] = _tensor(a.t)
        else:
            out[a.name] = onnx.helper.get_attribute_value(a)
    return out


# ---- operators (opset 16 semantics, the subset this file uses) --------------------------------

def _axes(x, axes):
    return tuple(int(a) % x.ndim for a in np.atleast_1d(axes))


def op_slice(x, starts, ends, axes=None, steps=None):
    axes = range(len(starts)) if axes is None else [int(a) % x.ndim for a in axes]
    steps = [1] * len(starts) if steps is None else steps
    index = [slice(None)] * x.ndim
    for s, e, a, st in zip(starts, ends, axes, steps):
        n = x.shape[a]
        s, e, st = int(s), int(e), int(st)
        # ONNX clamps like Python slicing, with INT64 extremes meaning "to the end".
        if st > 0:
            s = max(0, min(n, s + n if s < 0 else s))
            e = max(0, min(n, e + n if e < 0 else e))
        else:
            s = max(-1, min(n - 1, s + n if s < 0 else s))
            e = max(-1, min(n - 1, e + n if e < 0 else e))
            e = None if e == -1 else e
        index[a] = slice(s, e, st)
    return x[tuple(index)]


def op_pad(x, pads, mode):
    pads = [int(p) for p in pads]
    r = x.ndim
    width = [(pads[i], pads[i + r]) for i in range(r)]
    if mode == "constant":
        return np.pad(x, width, mode="constant")
    if mode == "reflect":
        return np.pad(x, width, mode="reflect")  # ONNX reflect = numpy reflect (edge not repeated)
    if mode == "edge":
        return np.pad(x, width, mode="edge")
    raise NotImplementedError(f"Pad mode {mode}")


def op_conv(x, w, b, attrs):
    """N-d... here 1-d only: x [N, C, L], w [M, C/group, K]."""
    if x.ndim != 3:
        raise NotImplementedError("Conv: only 1-d convolutions")
    group = attrs.get("group", 1)
    stride = attrs.get("strides", [1])[0]
    dilation = attrs.get("dilations", [1])[0]
    pads = attrs.get("pads", [0, 0])
    if attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        raise NotImplementedError("Conv auto_pad")
    x = np.pad(x, [(0, 0), (0, 0), (pads[0], pads[1])])
    n, c, length = x.shape
    m, cg, k = w.shape
    span = dilation * (k - 1) + 1
    out_len = (length - span) // stride + 1
    idx = np.arange(out_len)[:, None] * stride + np.arange(k)[None, :] * dilation  # [T, K]
    cols = x[:, :, idx]  # [N, C, T, K]
    mg = m // group
    outs = []
    for g in range(group):
        xg = cols[:, g * cg:(g + 1) * cg]  # [N, cg, T, K]
        wg = w[g * mg:(g + 1) * mg]        # [mg, cg, K]
        outs.append(np.einsum("nctk,mck->nmt", xg, wg))
    y = np.concatenate(outs, axis=1)
    if b is not None:
        y = y + b[None, :, None]
    return y


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def op_lstm(inputs, attrs):
    """ONNX LSTM, forward direction, default activations (sigmoid, tanh, tanh), gates in ONNX
    order i, o, f, c; X [T, N, I], W [1, 4H, I], R [1, 4H, H], B [1, 8H]."""
    x, w, r = inputs[0], inputs[1], inputs[2]
    b = inputs[3] if len(inputs) > 3 and inputs[3] is not None else None
    if len(inputs) > 4 and inputs[4] is not None:
        raise NotImplementedError("LSTM sequence_lens")
    if len(inputs) > 7 and inputs[7] is not None:
        raise NotImplementedError("LSTM peepholes")
    for unsupported in ("activations", "clip", "input_forget"):
        if attrs.get(unsupported):
            raise NotImplementedError(f"LSTM {unsupported}")
    if attrs.get("direction", b"forward") not in (b"forward", "forward") or w.shape[0] != 1:
        raise NotImplementedError("LSTM: forward direction only")
    if attrs.get("layout", 0) != 0:
        raise NotImplementedError("LSTM layout 1")
    hidden = attrs["hidden_size"]
    steps, batch, _ = x.shape
    h = inputs[5][0] if len(inputs) > 5 and inputs[5] is not None else np.zeros((batch, hidden))
    c = inputs[6][0] if len(inputs) > 6 and inputs[6] is not None else np.zeros((batch, hidden))
    wb = b[0, :4 * hidden] if b is not None else 0.0
    rb = b[0, 4 * hidden:] if b is not None else 0.0
    ys = []
    for t in range(steps):
        gates = x[t] @ w[0].T + wb + h @ r[0].T + rb
        i, o, f, g = np.split(gates, 4, axis=1)
        c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
        h = sigmoid(o) * np.tanh(c)
        ys.append(h)
    y = np.stack(ys)[:, None]  # [T, num_directions, N, H]
    return [y, h[None], c[None]]


class Interpreter:
    """Runs a graph: values by name, subgraphs seeing their enclosing scopes."""

    def __init__(self, model):
        self.model = model
        self.ops_seen = set()

    def run(self, feeds):
        env = dict(feeds)
        graph = self.model.graph
        self._run_graph(graph, env)
        return [env[o.name] for o in graph.output]

    def _run_graph(self, graph, env):
        for init in graph.initializer:
            env[init.name] = _tensor(init)
        for node in graph.node:
            self._run_node(node, env)
        return [env[o.name] for o in graph.output]

    def _run_node(self, node, env):
        self.ops_seen.add(node.op_type)
        if node.domain not in ("", "ai.onnx"):
            raise NotImplementedError(f"domain {node.domain}")
        inputs = [env[name] if name else None for name in node.input]
        attrs = _attrs(node)
        outputs = self._compute(node.op_type, inputs, attrs, env)
        for name, value in zip(node.output, outputs):
            if name:
                env[name] = value

    def _compute(self, op, x, attrs, env):
        if op == "Constant":
            if "value" in attrs:
                return [attrs["value"]]
            raise NotImplementedError("Constant without a tensor value")
        if op == "If":
            branch = attrs["then_branch"] if bool(np.asarray(x[0]).reshape(-1)[0]) else attrs["else_branch"]
            return self._run_graph(branch, dict(env))  # a branch sees, but does not change, its scope
        if op == "Identity":
            return [x[0]]
        if op == "Equal":
            return [np.equal(x[0], x[1])]
        if op == "Not":
            return [np.logical_not(x[0])]
        if op == "Cast":
            return [np.asarray(x[0]).astype(NP_OF_ONNX[attrs["to"]])]
        if op == "Shape":
            return [np.array(np.shape(x[0]), dtype=np.int64)]
        if op == "Size":
            return [np.array(np.size(x[0]), dtype=np.int64)]
        if op == "Gather":
            return [np.take(x[0], x[1].astype(np.int64), axis=attrs.get("axis", 0))]
        if op == "ConstantOfShape":
            value = attrs.get("value", np.zeros(1, dtype=np.float64))
            return [np.full(tuple(int(d) for d in x[0]), value.reshape(-1)[0], dtype=value.dtype)]
        if op == "Concat":
            return [np.concatenate([np.atleast_1d(v) for v in x], axis=attrs["axis"])]
        if op == "Reshape":
            shape = [int(d) for d in x[1]]
            if not attrs.get("allowzero", 0):
                shape = [x[0].shape[i] if d == 0 else d for i, d in enumerate(shape)]
            return [np.reshape(x[0], shape)]
        if op == "Transpose":
            return [np.transpose(x[0], attrs.get("perm"))]
        if op == "Slice":
            return [op_slice(x[0], x[1], x[2], *(v for v in x[3:]))]
        if op == "Unsqueeze":
            out = x[0]
            for a in sorted(int(a) % (out.ndim + len(x[1])) for a in x[1]):
                out = np.expand_dims(out, a)
            return [out]
        if op == "Squeeze":
            if len(x) > 1 and x[1] is not None:
                return [np.squeeze(x[0], axis=_axes(x[0], x[1]))]
            return [np.squeeze(x[0])]
        if op == "Pad":
            if len(x) > 2 and x[2] is not None and np.any(x[2]):
                raise NotImplementedError("Pad with a constant value")
            mode = attrs.get("mode", b"constant")
            return [op_pad(x[0], x[1], mode.decode() if isinstance(mode, bytes) else mode)]
        if op == "Conv":
            return [op_conv(x[0], x[1], x[2] if len(x) > 2 else None, attrs)]
        if op == "Pow":
            return [np.power(x[0], x[1])]
        if op == "Add":
            return [x[0] + x[1]]
        if op == "Sqrt":
            return [np.sqrt(x[0])]
        if op == "Relu":
            return [np.maximum(x[0], 0)]
        if op == "Sigmoid":
            return [sigmoid(x[0])]
        if op == "ReduceMean":
            axes = attrs.get("axes")
            return [np.mean(x[0], axis=None if axes is None else _axes(x[0], axes),
                            keepdims=bool(attrs.get("keepdims", 1)))]
        if op == "LSTM":
            return op_lstm(x, attrs)
        raise NotImplementedError(f"ONNX op {op}")


def run_streams(interp, recordings):
    """recordings: [B] arrays with the same number of windows. Returns probs [B, W], h, c [B, W, 128]."""
    num_windows = -(-len(recordings[0]) // WINDOW)
    padded = np.zeros((len(recordings), num_windows * WINDOW))
    for i, r in enumerate(recordings):
        if -(-len(r) // WINDOW) != num_windows:
            raise ValueError("--batch needs recordings with the same number of windows")
        padded[i, :len(r)] = r
    state = np.zeros((2, len(recordings), 128))
    context = np.zeros((len(recordings), CONTEXT))
    probs, hs, cs = [], [], []
    for w in range(num_windows):
        chunk = padded[:, w * WINDOW:(w + 1) * WINDOW]
        x = np.concatenate([context, chunk], axis=1)
        out, state = interp.run({"input": x, "state": state, "sr": np.array(SAMPLE_RATE, dtype=np.int64)})
        context = x[:, -CONTEXT:]
        probs.append(out[:, 0])
        hs.append(state[0])
        cs.append(state[1])
    return np.stack(probs, 1), np.stack(hs, 1), np.stack(cs, 1)


def main():
    import torch

    parser = cli.generator_parser(__doc__.splitlines()[0])
    parser.add_argument("--onnx", required=True, help="silero_vad.onnx")
    parser.add_argument("--input", required=True, help="safetensors of 16 kHz recordings")
    parser.add_argument("--batch", action="store_true", help="run the recordings as one batch")
    args = parser.parse_args()

    interp = Interpreter(onnx.load(args.onnx))
    inputs = {k: v.double().numpy() for k, v in safetensors_io.load_file(args.input).items()}
    names = sorted(inputs)
    groups = [names] if args.batch else [[n] for n in names]
    out = {}
    for group in groups:
        probs, h, c = run_streams(interp, [inputs[n] for n in group])
        for i, name in enumerate(group):
            out[f"{name}.probs"] = torch.from_numpy(probs[i].astype(np.float32))
            out[f"{name}.h"] = torch.from_numpy(h[i].astype(np.float32))
            out[f"{name}.c"] = torch.from_numpy(c[i].astype(np.float32))
    hf_dir.save_reference(args.out, out, {"ops": ",".join(sorted(interp.ops_seen))})


if __name__ == "__main__":
    main()
