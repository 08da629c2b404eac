// A minimal ONNX ModelProto writer (protobuf wire format, only the fields used here) for the
// Benchmark page's peer: a graph of com.microsoft MatMulNBits nodes, built in memory with the
// same 4-bit weights as ours. Field numbers are onnx.proto's (onnx/onnx, IR version 8).
//
// Our Q4 format (src/ops/matmulQ4.ts) and MatMulNBits with bits 4, block_size 32 and no
// zero_points hold the same values byte for byte: both store two codes per byte, the lower
// k in the low nibble, 32 consecutive k per block, rows of W [N, K] one after another, and
// dequantize w = scale·(code − 8) (MatMulNBits' default zero point for 4 bits is 8). So B is our
// codes buffer read as bytes ([N, K/32, 16]) and scales are our f16 scales widened to f32 ([N·K/32]).

import { f16BitsToF32 } from '../model/dtype';

const WIRE_VARINT = 0;
const WIRE_BYTES = 2;

/** Protobuf writer: fields appended in order as a list of chunks, joined once by finish(). */
class Proto {
  private readonly parts: Uint8Array[] = [];
  private size = 0;

  private push(b: Uint8Array): void {
    this.parts.push(b);
    this.size += b.length;
  }

  private varint(v: number): void {
    if (!Number.isSafeInteger(v) || v < 0) throw new Error(`onnx: varint ${v} out of range`);
    const out: number[] = [];
    while (v >= 0x80) {
      out.push((v % 0x80) | 0x80);
      v = Math.floor(v / 0x80);
    }
    out.push(v);
    this.push(Uint8Array.from(out));
  }

  private tag(field: number, wire: number): void {
    this.varint(field * 8 + wire);
  }

  int(field: number, v: number): this {
    this.tag(field, WIRE_VARINT);
    this.varint(v);
    return this;
  }

  bytes(field: number, b: Uint8Array): this {
    this.tag(field, WIRE_BYTES);
    this.varint(b.length);
    this.push(b);
    return this;
  }

  string(field: number, s: string): this {
    return this.bytes(field, new TextEncoder().encode(s));
  }

  /** A nested message, its chunks shared rather than copied (weights are hundreds of MB in the full preset). */
  message(field: number, m: Proto): this {
    this.tag(field, WIRE_BYTES);
    this.varint(m.size);
    for (const p of m.parts) this.push(p);
    return this;
  }

  /** Packed repeated varints (int64 dims). */
  packed(field: number, vs: readonly number[]): this {
    const p = new Proto();
    for (const v of vs) p.varint(v);
    return this.bytes(field, p.finish());
  }

  finish(): Uint8Array {
    if (this.parts.length === 1) return this.parts[0];
    const out = new Uint8Array(this.size);
    let o = 0;
    for (const p of this.parts) {
      out.set(p, o);
      o += p.length;
    }
    this.parts.splice(0, this.parts.length, out);
    return out;
  }
}

/** TensorProto.DataType values used here. */
export const ONNX_FLOAT = 1;
export const ONNX_UINT8 = 2;

export interface OnnxTensor {
  name: string;
  dataType: typeof ONNX_FLOAT | typeof ONNX_UINT8;
  dims: number[];
  /** Little-endian raw data (raw_data). */
  raw: Uint8Array;
}

export interface OnnxValue {
  name: string;
  dataType: typeof ONNX_FLOAT | typeof ONNX_UINT8;
  /** Numbers are fixed dimensions, strings symbolic ones. */
  dims: (number | string)[];
}

export interface OnnxNode {
  opType: string;
  domain?: string;
  name: string;
  inputs: string[];
  outputs: string[];
  /** INT attributes only (all MatMulNBits needs). */
  intAttributes?: Record<string, number>;
}

export interface OnnxGraph {
  name: string;
  nodes: OnnxNode[];
  initializers: OnnxTensor[];
  inputs: OnnxValue[];
  outputs: OnnxValue[];
  /** domain -> opset version ('' is the default ONNX domain). */
  opsets: Record<string, number>;
}

const ATTRIBUTE_INT = 2;

function tensorProto(t: OnnxTensor): Proto {
  return new Proto().packed(1, t.dims).int(2, t.dataType).string(8, t.name).bytes(9, t.raw);
}

function valueInfo(v: OnnxValue): Proto {
  const shape = new Proto();
  for (const d of v.dims) shape.message(1, typeof d === 'number' ? new Proto().int(1, d) : new Proto().string(2, d));
  const tensorType = new Proto().int(1, v.dataType).message(2, shape);
  return new Proto().string(1, v.name).message(2, new Proto().message(1, tensorType));
}

function nodeProto(n: OnnxNode): Proto {
  const p = new Proto();
  for (const i of n.inputs) p.string(1, i);
  for (const o of n.outputs) p.string(2, o);
  p.string(3, n.name).string(4, n.opType);
  for (const [name, v] of Object.entries(n.intAttributes ?? {})) p.message(5, new Proto().string(1, name).int(20, ATTRIBUTE_INT).int(3, v));
  if (n.domain) p.string(7, n.domain);
  return p;
}

/** The serialized ModelProto of `g`. */
export function onnxModel(g: OnnxGraph): Uint8Array {
  const graph = new Proto();
  for (const n of g.nodes) graph.message(1, nodeProto(n));
  graph.string(2, g.name);
  for (const t of g.initializers) graph.message(5, tensorProto(t));
  for (const v of g.inputs) graph.message(11, valueInfo(v));
  for (const v of g.outputs) graph.message(12, valueInfo(v));
  const model = new Proto().int(1, 8).string(2, 'vlrl');
  for (const [domain, version] of Object.entries(g.opsets)) model.message(8, new Proto().string(1, domain).int(2, version));
  return model.message(7, graph).finish();
}

/** A Q4 weight [n, k] (src/ops/matmulQ4.ts: codes and f16 scale pairs) as MatMulNBits' B and scales. */
export function q4ToMatMulNBits(codes: Uint32Array, scales: Uint32Array, n: number, k: number): { b: Uint8Array; scales: Float32Array } {
  const groups = (n * k) / 32;
  if (codes.length !== (n * k) / 8 || scales.length !== Math.ceil(groups / 2)) throw new Error(`q4ToMatMulNBits: buffers do not hold a [${n}, ${k}] weight`);
  const out = new Float32Array(groups);
  for (let s = 0; s < groups; s++) out[s] = f16BitsToF32((scales[s >> 1] >>> (16 * (s & 1))) & 0xffff);
  return { b: new Uint8Array(codes.buffer, codes.byteOffset, codes.byteLength), scales: out };
}

/**
 * y_c = x·W_cᵀ for `copies` MatMulNBits nodes sharing the input x [M, K] (M symbolic), each with its
 * own initializer of the same 4-bit weight, so that timing cycles through weights L2 cannot hold,
 * as ours does. Outputs y0..y{copies-1}, each [M, N].
 */
export function matMulNBitsModel(weight: { b: Uint8Array; scales: Float32Array }, n: number, k: number, copies: number): Uint8Array {
  const blocks = k / 32;
  const initializers: OnnxTensor[] = [];
  const nodes: OnnxNode[] = [];
  const scaleBytes = new Uint8Array(weight.scales.buffer, weight.scales.byteOffset, weight.scales.byteLength);
  for (let c = 0; c < copies; c++) {
    initializers.push({ name: `w${c}`, dataType: ONNX_UINT8, dims: [n, blocks, 16], raw: weight.b });
    initializers.push({ name: `s${c}`, dataType: ONNX_FLOAT, dims: [n * blocks], raw: scaleBytes });
    nodes.push({ opType: 'MatMulNBits', domain: 'com.microsoft', name: `mm${c}`, inputs: ['x', `w${c}`, `s${c}`], outputs: [`y${c}`], intAttributes: { K: k, N: n, bits: 4, block_size: 32 } });
  }
  return onnxModel({
    name: 'matmulnbits',
    nodes,
    initializers,
    inputs: [{ name: 'x', dataType: ONNX_FLOAT, dims: ['M', k] }],
    outputs: Array.from({ length: copies }, (_, c) => ({ name: `y${c}`, dataType: ONNX_FLOAT, dims: ['M', n] })),
    opsets: { '': 21, 'com.microsoft': 1 },
  });
}
