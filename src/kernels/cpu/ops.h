// CPU kernels: forward and backward of every op of a GPT block, float32,
// written out per op (no autograd). Shapes follow llm.c: N = B*T rows,
// C channels. Matrices are row-major; linear weights are [out, in] like
// torch.nn.Linear.
//
// Backward convention: every backward ACCUMULATES (+=) into each gradient it
// writes (parameter gradients and input gradients alike). The caller zeroes
// activation-gradient buffers before a backward pass and zeroes parameter
// gradients once per optimizer step (so micro-batches accumulate).
// Any gradient pointer documented as optional may be null: it is skipped.
#pragma once

#include <cstdint>

namespace scaletrain::cpu {

// Threads used by the loops here and by BLAS. n <= 0: all cores.
void SetNumThreads(int n);
int NumThreads();
// Which BLAS we link and how it is threaded, for logs.
const char* BlasInfo();

// ---- matmul.cpp ------------------------------------------------------------
// out[N,OC] = inp[N,C] @ weight[OC,C]^T + bias[OC]   (bias optional)
void MatmulForward(float* out, const float* inp, const float* weight, const float* bias,
                   int64_t N, int64_t C, int64_t OC);
// dinp[N,C] += dout[N,OC] @ weight[OC,C]; dweight[OC,C] += dout^T @ inp;
// dbias[OC] += sum over rows of dout. dinp, dweight, dbias optional.
void MatmulBackward(float* dinp, float* dweight, float* dbias, const float* dout,
                    const float* inp, const float* weight, int64_t N, int64_t C, int64_t OC);

// ---- norm.cpp --------------------------------------------------------------
// LayerNorm over the last dimension, eps = 1e-5 (as torch's default).
// mean[N], rstd[N] are saved for backward.
void LayerNormForward(float* out, float* mean, float* rstd, const float* inp,
                      const float* weight, const float* bias, int64_t N, int64_t C);
// Each of dinp, dweight, dbias optional (accumulate); weight is read only
// for dinp (null when dinp is: the weight-gradient half alone).
void LayerNormBackward(float* dinp, float* dweight, float* dbias, const float* dout,
                       const float* inp, const float* weight, const float* mean,
                       const float* rstd, int64_t N, int64_t C);

// RMSNorm (Llama): out = inp * rstd * weight, rstd = 1/sqrt(mean(inp^2) +
// eps), saved per row for backward.
void RMSNormForward(float* out, float* rstd, const float* inp, const float* weight, int64_t N,
                    int64_t C, float eps);
// dinp (optional) and dweight (optional) accumulate; weight is read only
// for dinp (null when dinp is: the weight-gradient half alone).
void RMSNormBackward(float* dinp, float* dweight, const float* dout, const float* inp,
                     const float* weight, const float* rstd, int64_t N, int64_t C);

// ---- activation.cpp --------------------------------------------------------
// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
void GeluForward(float* out, const float* inp, int64_t n);
void GeluBackward(float* dinp, const float* inp, const float* dout, int64_t n);
// SwiGLU (Shazeer 2020): gate_up[N, 2F] holds the gate g (first F columns)
// and the up projection u (last F) of each row; out[N, F] = silu(g) * u.
void SwiGLUForward(float* out, const float* gate_up, int64_t N, int64_t F);
// dgate_up[N, 2F] += the gradient of both halves.
void SwiGLUBackward(float* dgate_up, const float* gate_up, const float* dout, int64_t N,
                    int64_t F);
// out = a + b
void ResidualForward(float* out, const float* a, const float* b, int64_t n);
// da += dout; db += dout
void ResidualBackward(float* da, float* db, const float* dout, int64_t n);

// ---- embedding.cpp ---------------------------------------------------------
// out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]   (wpe optional: Llama has none)
void EncoderForward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                    int64_t B, int64_t T, int64_t C);
// dwte[tokens[b,t],:] += dout[b,t,:]; dwpe[t,:] += dout[b,t,:]  (dwpe optional)
void EncoderBackward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                     int64_t B, int64_t T, int64_t C);

// Vocab-parallel forms (tensor parallelism): this rank holds rows
// [vocab_begin, vocab_begin + rows) of the embedding. Rows n of the output
// whose token is elsewhere get 0 (the TP all-reduce fills them in).
void EmbeddingShardForward(float* out, const int32_t* tokens, const float* wte,
                           int64_t vocab_begin, int64_t rows, int64_t N, int64_t C);
// dwte[tokens[n] - vocab_begin,:] += dout[n,:] for the tokens this rank holds.
void EmbeddingShardBackward(float* dwte, const float* dout, const int32_t* tokens,
                            int64_t vocab_begin, int64_t rows, int64_t N, int64_t C);
// Position embeddings for `rows` rows of a [B*T, C] activation starting at
// row row_begin (sequence parallelism hands a rank a slice of the rows):
// out[i,:] += wpe[(row_begin + i) % T,:]; backward dwpe[...] += dout[i,:].
void PositionForward(float* out, const float* wpe, int64_t row_begin, int64_t rows, int64_t T,
                     int64_t C);
void PositionBackward(float* dwpe, const float* dout, int64_t row_begin, int64_t rows, int64_t T,
                      int64_t C);
// The same with row i at position positions[(row_begin + i) % T] (context
// parallelism).
void PositionForwardAt(float* out, const float* wpe, const int32_t* positions, int64_t row_begin,
                       int64_t rows, int64_t T, int64_t C);
void PositionBackwardAt(float* dwpe, const float* dout, const int32_t* positions,
                        int64_t row_begin, int64_t rows, int64_t T, int64_t C);

// ---- rope.cpp --------------------------------------------------------------
// Rotary position embeddings, Llama / Hugging Face convention, in place on
// `heads` consecutive heads of hs channels at the start of each of N rows
// (row stride ld; row n is position n % T): each head's halves [x1, x2]
// become [x1 cos - x2 sin, x2 cos + x1 sin] with angle t * theta^(-2i/hs)
// for pair i < hs/2. inverse: the opposite turn, which is the backward (the
// rotation is orthogonal). hs must be even.
void RopeApply(float* x, int64_t N, int64_t T, int64_t ld, int64_t heads, int64_t hs, double theta,
               bool inverse);
// The same with row n at position positions[n % T] (context parallelism: a
// rank's rows are chunks of the sequence); null positions: n % T.
void RopeApplyAt(float* x, int64_t N, int64_t T, const int32_t* positions, int64_t ld,
                 int64_t heads, int64_t hs, double theta, bool inverse);

// ---- attention.cpp ---------------------------------------------------------
// Causal multi-head self-attention. qkv[B,T,3C] holds q, k, v one after the
// other along the last dimension (each C wide, head h at columns h*hs..), as
// nanoGPT's c_attn output. out[B,T,C] (heads concatenated). att[B,NH,T,T]
// receives the softmax probabilities (entries above the diagonal are 0),
// saved for backward. Scale 1/sqrt(hs), hs = C/NH.
void AttentionForward(float* out, float* att, const float* qkv, int64_t B, int64_t T,
                      int64_t C, int64_t NH);
// dqkv[B,T,3C] += gradient; datt[B,NH,T,T] is scratch (overwritten).
// att must be as AttentionForward wrote it: the backward relies on its
// exact zeros above the diagonal.
void AttentionBackward(float* dqkv, float* datt, const float* dout, const float* qkv,
                       const float* att, int64_t B, int64_t T, int64_t C, int64_t NH);

// Grouped-query attention (Ainslie et al. 2023). qkv rows are [q | k | v]:
// NH query heads, then NKV key heads, then NKV value heads, hs wide each
// (row width (NH + 2 NKV) hs); out[B,T,NH*hs]. Query head h reads key/value
// head (h0 + h) / group - a rank of a tensor-parallel layout holding
// query heads h0.. of a model whose key/value heads serve `group` query
// heads each. NKV = NH, group = 1, h0 = 0 is AttentionForward above.
struct AttentionHeads {
  int64_t NH = 1, NKV = 1, hs = 1, group = 1, h0 = 0;
};
void GqaAttentionForward(float* out, float* att, const float* qkv, int64_t B, int64_t T,
                         const AttentionHeads& heads);
// dqkv += gradient; key/value heads shared by several query heads sum them.
void GqaAttentionBackward(float* dqkv, float* datt, const float* dout, const float* qkv,
                          const float* att, int64_t B, int64_t T, const AttentionHeads& heads);

// ---- ring_attention.cpp ----------------------------------------------------
// Causal attention one key/value block at a time (context parallelism's ring,
// parallel.cp). A rank's rows, of queries or of a key/value block, are
// `count` chunks of `len` consecutive positions each: chunk ids[i] holds
// positions ids[i] * len ... ids[i] * len + len - 1 (the load-balanced split
// gives rank r of cp the chunks r and 2 cp - 1 - r). A key attends a query
// when its position is not later.
struct SeqChunks {
  int64_t ids[2] = {0, 1};
  int64_t count = 2;
  int64_t len = 1;
  int64_t rows() const { return count * len; }
};
// The queries are the q part of qkv ([B, q.rows(), (NH + 2 NKV) hs], as
// GqaAttentionForward's); a key/value block `kv` is [B, k.rows(), 2 NKV hs]
// (the k and v parts of its rows, PackKeyValues). out [B, rows, NH hs];
// row_max, row_sum, lse, dsum: [B, NH, rows].
// Forward: Begin, then ForwardBlock with every block (any order), then End:
// out is the attention over all blocks and lse (written over row_max) each
// row's log-sum-exp of its scaled scores, kept for the backward.
void RingAttentionBegin(float* out, float* row_max, float* row_sum, int64_t B, const SeqChunks& q,
                        const AttentionHeads& heads);
void RingAttentionForwardBlock(float* out, float* row_max, float* row_sum, float* scratch,
                               const float* qkv, const float* kv, int64_t B, const SeqChunks& q,
                               const SeqChunks& k, const AttentionHeads& heads);
void RingAttentionEnd(float* out, float* lse, const float* row_sum, int64_t B, const SeqChunks& q,
                      const AttentionHeads& heads);
// Backward: BackwardBegin (dsum = the rows' dout . out), then BackwardBlock
// with every block: dqkv's q part += the block's share of dq, dkv (laid out
// like kv) += the block's dk, dv.
void RingAttentionBackwardBegin(float* dsum, const float* dout, const float* out, int64_t B,
                                const SeqChunks& q, const AttentionHeads& heads);
void RingAttentionBackwardBlock(float* dqkv, float* dkv, float* scratch, const float* dout,
                                const float* qkv, const float* kv, const float* lse,
                                const float* dsum, int64_t B, const SeqChunks& q,
                                const SeqChunks& k, const AttentionHeads& heads);
// The scratch floats ForwardBlock and BackwardBlock need.
int64_t RingAttentionScratchFloats(int64_t B, const SeqChunks& q, const AttentionHeads& heads);
// kv[N, 2 NKV hs] = the k and v parts of qkv's N rows; dqkv's k and v parts
// += dkv.
void PackKeyValues(float* kv, const float* qkv, int64_t N, const AttentionHeads& heads);
void AddKeyValueGrads(float* dqkv, const float* dkv, int64_t N, const AttentionHeads& heads);

// ---- loss.cpp --------------------------------------------------------------
// Softmax cross-entropy over the first V of Vp columns (Vp >= V: padding
// columns never take part). probs[N,Vp] = softmax (padding columns 0),
// losses[N] = -log probs[target].
void CrossEntropyForward(float* losses, float* probs, const float* logits,
                         const int32_t* targets, int64_t N, int64_t V, int64_t Vp);
// dlogits[N,Vp] = (probs - onehot(target)) * dloss; padding columns 0.
// Overwrites (not accumulates) dlogits, and may alias probs (in place).
void CrossEntropyBackward(float* dlogits, const float* probs, const int32_t* targets,
                          float dloss, int64_t N, int64_t V, int64_t Vp);

// Vocab-parallel cross-entropy (Megatron-LM): this rank holds logits[N,Vl]
// for vocabulary ids [vocab_begin, vocab_begin + Vl), of which the first
// `valid` are real (the rest padding, never scored). Three passes with TP
// reductions between them: row maxima (all-reduce max), then the sums of
// exp and the target's logit (all-reduce sum; a target held elsewhere
// contributes 0), then the loss and this shard's probabilities.
void CrossEntropyShardMax(float* row_max, const float* logits, int64_t N, int64_t Vl,
                          int64_t valid);
void CrossEntropyShardSums(float* sum_exp, float* target_logit, const float* logits,
                           const float* row_max, const int32_t* targets, int64_t vocab_begin,
                           int64_t N, int64_t Vl, int64_t valid);
// losses[n] = log(sum_exp) + row_max - target_logit; probs[n, j] = softmax
// for j < valid, 0 for padding.
void CrossEntropyShardFinish(float* losses, float* probs, const float* logits,
                             const float* row_max, const float* sum_exp, const float* target_logit,
                             int64_t N, int64_t Vl, int64_t valid);
// dlogits = (probs - onehot(target)) * dloss on this shard; may alias probs.
void CrossEntropyShardBackward(float* dlogits, const float* probs, const int32_t* targets,
                               int64_t vocab_begin, float dloss, int64_t N, int64_t Vl,
                               int64_t valid);

// ---- optimizer.cpp ---------------------------------------------------------
// One AdamW step over n elements (torch.optim.AdamW semantics, decoupled
// decay): g = grad * grad_scale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
// param -= lr * (mhat / (sqrt(vhat) + eps) + weight_decay * param), with
// mhat = m / (1 - b1^t), vhat = v / (1 - b2^t), t the 1-based step.
void AdamWUpdate(float* param, const float* grad, float* m, float* v, int64_t n, float lr,
                 float beta1, float beta2, float eps, float weight_decay, int64_t t,
                 float grad_scale);
// Sum of squares of x[0..n), accumulated in double.
double SumSquares(const float* x, int64_t n);

}  // namespace scaletrain::cpu
