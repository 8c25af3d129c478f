// The graph IR: a DAG of op nodes over typed values, kept in topological order.
//
//   ir::Graph g;
//   ir::Entry x = g.add_input("data", {Shape{1, 512}, DType::kFloat32});
//   ir::Entry w = g.add_param("dense0.weight", {Shape{256, 512}, DType::kFloat32});
//   ir::Entry y = g.add_op(OpId::kFullyConnected, attrs, {x, w}, "dense0")[0];
//   g.set_outputs({y});
//   std::cout << g.to_text();          // the text form (ir/printer.cc), parsed by ir::parse_graph
//
// Invariants (checked by ir::verify): every node's inputs refer to earlier
// nodes and to outputs they have; op nodes have the arity and the types their
// OpDef infers; names are unique. `add_op` infers the output types at once,
// so shape errors surface while building, naming the node.
//
// A Graph is a value: copy it to transform it. Passes (passes/) take a Graph
// and return a new one (or modify a copy), never sharing nodes.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/attrs.h"
#include "ir/op.h"

namespace kiln::ir {

using NodeId = int32_t;

// One output of one node.
struct Entry {
  NodeId node = -1;
  int32_t index = 0;
  bool operator==(const Entry&) const = default;
};

enum class NodeKind : int8_t {
  kInput,  // fed per call (data)
  kParam,  // a learned parameter (MXNet "arg:")
  kAux,    // an auxiliary state an op mutates (MXNet "aux:", BatchNorm running stats)
  kConst,  // a constant folded into the graph (value held by the graph)
  kOp,
};

struct Node {
  NodeKind kind = NodeKind::kOp;
  OpId op{};  // kOp only
  OpAttrs attrs;
  std::string name;
  std::vector<Entry> inputs;
  std::vector<TensorType> types;  // one per output
  int num_outputs() const { return static_cast<int>(types.size()); }
  bool is_op() const { return kind == NodeKind::kOp; }
};

class Graph {
 public:
  Entry add_input(std::string name, TensorType type);
  Entry add_param(std::string name, TensorType type, bool is_aux = false);
  Entry add_const(std::string name, TensorType type, int32_t const_slot);
  // Appends an op node; infers its output types (errors name the node).
  // `name` empty: a unique name is made from the op ("relu3").
  std::vector<Entry> add_op(OpId op, OpAttrs attrs, std::span<const Entry> inputs, std::string name = {});

  void set_outputs(std::vector<Entry> outputs) { outputs_ = std::move(outputs); }
  const std::vector<Entry>& outputs() const { return outputs_; }

  const std::vector<Node>& nodes() const { return nodes_; }
  const Node& node(NodeId id) const { return nodes_[static_cast<size_t>(id)]; }
  Node& mutable_node(NodeId id) { return nodes_[static_cast<size_t>(id)]; }
  size_t size() const { return nodes_.size(); }
  const TensorType& type(Entry e) const { return node(e.node).types[static_cast<size_t>(e.index)]; }

  // Nodes of a kind, in graph order.
  std::vector<NodeId> nodes_of_kind(NodeKind kind) const;
  std::optional<NodeId> find(std::string_view name) const;

  // Number of op nodes.
  int64_t num_ops() const;

  std::string to_text() const;  // ir/printer.cc

 private:
  NodeId append(Node node);
  std::string unique_name(std::string_view base);

  std::vector<Node> nodes_;
  std::vector<Entry> outputs_;
  std::unordered_map<std::string, NodeId> by_name_;
  std::unordered_map<std::string, int> name_counters_;
};

// Parses the text form written by Graph::to_text. Throws ValueError with the
// line and column of the problem.
Graph parse_graph(std::string_view text);

// Checks the invariants above; throws InternalError describing the first
// violation (a pass that breaks the graph is a bug in Kiln).
void verify(const Graph& g);

std::string_view node_kind_name(NodeKind kind);

}  // namespace kiln::ir
