// The LLVM code generator of fused elementwise programs (fused_jit.h).
//
// Each program becomes a module with two functions: `body`, which takes one
// noalias float pointer per buffer and loops over [begin, end), and the
// exported `f(void** bufs, begin, end)`, which loads the pointers and calls
// body. Inlining body turns noalias into alias scopes, so the vectorizer
// needs no runtime overlap checks however many buffers there are.
#include "backends/cpu/jit/fused_jit.h"

#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Passes/OptimizationLevel.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>

#include <cstdlib>
#include <limits>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace kiln::cpu::jit {
namespace {

std::string to_string(llvm::Error e) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << e;
  return os.str();
}

// IR for one instruction at a time; mirrors elemwise_math.h and the
// interpreter (fused_interpret.cc) operation for operation. Multiply-adds of
// the polynomials are llvm.fmuladd (fused where the CPU has FMA, as GCC does
// for the C++ versions).
class Emitter {
 public:
  explicit Emitter(llvm::IRBuilder<>& b) : b_(b), f32_(b.getFloatTy()), i32_(b.getInt32Ty()) {}

  llvm::Value* c(float v) { return llvm::ConstantFP::get(f32_, v); }
  llvm::Value* ci(int32_t v) {
    return llvm::ConstantInt::get(i32_, static_cast<uint64_t>(static_cast<int64_t>(v)), true);
  }
  llvm::Value* bits(llvm::Value* f) { return b_.CreateBitCast(f, i32_); }
  llvm::Value* flt(llvm::Value* i) { return b_.CreateBitCast(i, f32_); }
  llvm::Value* madd(llvm::Value* a, llvm::Value* x, llvm::Value* y) {
    return b_.CreateIntrinsic(llvm::Intrinsic::fmuladd, {f32_}, {a, x, y});
  }
  llvm::Value* fabs(llvm::Value* a) { return b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, a); }
  llvm::Value* select(llvm::Value* m, llvm::Value* a, llvm::Value* b) { return b_.CreateSelect(m, a, b); }
  llvm::Value* boolean(llvm::Value* m) { return select(m, c(1), c(0)); }

  llvm::Value* pow2i(llvm::Value* n) { return flt(b_.CreateShl(b_.CreateAdd(n, ci(127)), 23)); }

  llvm::Value* exp(llvm::Value* x) {
    x = select(b_.CreateFCmpOLT(x, c(-104.0f)), c(-104.0f), x);
    x = select(b_.CreateFCmpOGT(x, c(89.0f)), c(89.0f), x);
    constexpr float kMagic = 12582912.0f;
    llvm::Value* t = madd(x, c(1.44269504088896341f), c(kMagic));
    llvm::Value* n = b_.CreateSub(bits(t), ci(0x4B400000));
    llvm::Value* nf = b_.CreateFSub(t, c(kMagic));
    llvm::Value* r = madd(b_.CreateFNeg(nf), c(0.693359375f), x);
    r = madd(b_.CreateFNeg(nf), c(-2.12194440e-4f), r);
    llvm::Value* p = c(1.9875691500e-4f);
    for (float k : {1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f})
      p = madd(p, r, c(k));
    p = b_.CreateFAdd(madd(p, b_.CreateFMul(r, r), r), c(1.0f));
    llvm::Value* n1 = b_.CreateAShr(n, 1);
    return b_.CreateFMul(b_.CreateFMul(p, pow2i(n1)), pow2i(b_.CreateSub(n, n1)));
  }

  llvm::Value* log(llvm::Value* x) {
    llvm::Value* tiny = b_.CreateFCmpOLT(x, c(1.17549435e-38f));
    llvm::Value* xs = select(tiny, b_.CreateFMul(x, c(8388608.0f)), x);
    llvm::Value* bx = bits(xs);
    llvm::Value* e = b_.CreateSub(b_.CreateAnd(b_.CreateAShr(bx, 23), ci(0xff)), ci(127));
    e = b_.CreateAdd(e, select(tiny, ci(-23), ci(0)));
    llvm::Value* m = flt(b_.CreateOr(b_.CreateAnd(bx, ci(0x007fffff)), ci(0x3f800000)));
    llvm::Value* big = b_.CreateFCmpOGT(m, c(1.41421356f));
    m = select(big, b_.CreateFMul(m, c(0.5f)), m);
    e = b_.CreateAdd(e, select(big, ci(1), ci(0)));
    llvm::Value* f = b_.CreateFSub(m, c(1.0f));
    llvm::Value* z = b_.CreateFMul(f, f);
    llvm::Value* p = c(7.0376836292e-2f);
    for (float k : {-1.1514610310e-1f, 1.1676998740e-1f, -1.2420140846e-1f, 1.4249322787e-1f, -1.6668057665e-1f,
                    2.0000714765e-1f, -2.4999993993e-1f, 3.3333331174e-1f})
      p = madd(p, f, c(k));
    llvm::Value* ef = b_.CreateSIToFP(e, f32_);
    llvm::Value* y = madd(b_.CreateFMul(p, f), z, b_.CreateFMul(c(-2.12194440e-4f), ef));
    y = madd(c(-0.5f), z, y);
    llvm::Value* result = madd(c(0.693359375f), ef, b_.CreateFAdd(f, y));
    const float inf = std::numeric_limits<float>::infinity();
    result = select(b_.CreateFCmpOEQ(x, c(0.0f)), c(-inf), result);
    result = select(b_.CreateFCmpOLT(x, c(0.0f)), c(std::numeric_limits<float>::quiet_NaN()), result);
    result = select(b_.CreateFCmpOEQ(x, c(inf)), c(inf), result);
    return select(b_.CreateFCmpUNO(x, x), x, result);
  }

  llvm::Value* tanh(llvm::Value* x) {
    llvm::Value* ax = fabs(x);
    llvm::Value* z = b_.CreateFMul(x, x);
    llvm::Value* p = c(-5.70498872745e-3f);
    for (float k : {2.06390887954e-2f, -5.37397155531e-2f, 1.33314422036e-1f, -3.33332819422e-1f}) p = madd(p, z, c(k));
    llvm::Value* small = madd(b_.CreateFMul(p, z), x, x);
    llvm::Value* large =
        b_.CreateFSub(c(1.0f), b_.CreateFDiv(c(2.0f), b_.CreateFAdd(exp(b_.CreateFAdd(ax, ax)), c(1.0f))));
    large = flt(b_.CreateOr(bits(large), b_.CreateAnd(bits(x), ci(static_cast<int32_t>(0x80000000u)))));
    return select(b_.CreateFCmpOLT(ax, c(0.625f)), small, large);
  }

  llvm::Value* sigmoid(llvm::Value* x) {
    llvm::Value* e = exp(b_.CreateFNeg(fabs(x)));
    llvm::Value* s = b_.CreateFDiv(c(1.0f), b_.CreateFAdd(c(1.0f), e));
    return select(b_.CreateFCmpOGE(x, c(0.0f)), s, select(b_.CreateFCmpUNO(x, x), x, b_.CreateFMul(e, s)));
  }

  llvm::Value* instr(FusedOpcode op, llvm::Value* a, llvm::Value* b, llvm::Value* cc, const FusedInstr& ins) {
    using O = FusedOpcode;
    switch (op) {
      case O::kAdd:
        return b_.CreateFAdd(a, b);
      case O::kSub:
        return b_.CreateFSub(a, b);
      case O::kMul:
        return b_.CreateFMul(a, b);
      case O::kDiv:
        return b_.CreateFDiv(a, b);
      case O::kPow:
        if (!ins.args[1].is_value() && ins.args[1].literal == 2.0f) return b_.CreateFMul(a, a);
        return b_.CreateBinaryIntrinsic(llvm::Intrinsic::pow, a, b);
      case O::kMax:
        return select(b_.CreateOr(b_.CreateFCmpOGT(a, b), b_.CreateFCmpUNO(a, a)), a, b);
      case O::kMin:
        return select(b_.CreateOr(b_.CreateFCmpOLT(a, b), b_.CreateFCmpUNO(a, a)), a, b);
      case O::kEq:
        return boolean(b_.CreateFCmpOEQ(a, b));
      case O::kNe:
        return boolean(b_.CreateFCmpUNE(a, b));
      case O::kGt:
        return boolean(b_.CreateFCmpOGT(a, b));
      case O::kGe:
        return boolean(b_.CreateFCmpOGE(a, b));
      case O::kLt:
        return boolean(b_.CreateFCmpOLT(a, b));
      case O::kLe:
        return boolean(b_.CreateFCmpOLE(a, b));
      case O::kWhere:
        return select(b_.CreateFCmpUNE(a, c(0.0f)), b, cc);
      case O::kNeg:
        return b_.CreateFNeg(a);
      case O::kAbs:
        return fabs(a);
      case O::kSquare:
        return b_.CreateFMul(a, a);
      case O::kSqrt:
        return b_.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, a);
      case O::kExp:
        return exp(a);
      case O::kLog:
        return log(a);
      case O::kTanh:
        return tanh(a);
      case O::kSigmoid:
        return sigmoid(a);
      case O::kRelu:
        return select(b_.CreateFCmpOGT(a, c(0.0f)), a, c(0.0f));
      case O::kSoftrelu: {
        llvm::Value* e = exp(b_.CreateFNeg(fabs(a)));
        llvm::Value* u = b_.CreateFAdd(c(1.0f), e);
        llvm::Value* d = b_.CreateFSub(u, c(1.0f));
        llvm::Value* l = select(b_.CreateFCmpOEQ(d, c(0.0f)), e, b_.CreateFMul(log(u), b_.CreateFDiv(e, d)));
        return b_.CreateFAdd(select(b_.CreateFCmpOLT(a, c(0.0f)), c(0.0f), a), l);
      }
      case O::kSoftsign:
        return b_.CreateFDiv(a, b_.CreateFAdd(c(1.0f), fabs(a)));
    }
    return nullptr;
  }

 private:
  llvm::IRBuilder<>& b_;
  llvm::Type* f32_;
  llvm::Type* i32_;
};

// Builds `name` (the exported loop) for the program in `module`.
void build_module(const FusedProgram& p, llvm::Module& module, const std::string& name, const llvm::TargetMachine& tm) {
  llvm::LLVMContext& ctx = module.getContext();
  llvm::IRBuilder<> b(ctx);
  llvm::Type* f32 = b.getFloatTy();
  llvm::Type* i64 = b.getInt64Ty();
  llvm::PointerType* fptr = f32->getPointerTo();
  const size_t k = p.inputs.size(), num_bufs = k + p.outputs.size();

  auto set_target = [&](llvm::Function* f) {
    f->addFnAttr("target-cpu", tm.getTargetCPU());
    f->addFnAttr("target-features", tm.getTargetFeatureString());
    f->addFnAttr(llvm::Attribute::NoUnwind);
  };

  // body(float* noalias b0, ..., i64 begin, i64 end)
  std::vector<llvm::Type*> params(num_bufs, fptr);
  params.push_back(i64);
  params.push_back(i64);
  auto* body = llvm::Function::Create(llvm::FunctionType::get(b.getVoidTy(), params, false),
                                      llvm::Function::InternalLinkage, "body", module);
  set_target(body);
  body->addFnAttr(llvm::Attribute::AlwaysInline);
  for (size_t j = 0; j < num_bufs; ++j) body->addParamAttr(static_cast<unsigned>(j), llvm::Attribute::NoAlias);
  llvm::Value* begin = body->getArg(static_cast<unsigned>(num_bufs));
  llvm::Value* end = body->getArg(static_cast<unsigned>(num_bufs + 1));

  auto* entry = llvm::BasicBlock::Create(ctx, "entry", body);
  auto* loop = llvm::BasicBlock::Create(ctx, "loop", body);
  auto* exit = llvm::BasicBlock::Create(ctx, "exit", body);
  b.SetInsertPoint(entry);
  std::vector<llvm::Value*> uniform(k, nullptr);  // scalar and channel inputs, read once
  for (size_t j = 0; j < k; ++j)
    if (p.inputs[j] == FusedInputKind::kScalar || p.inputs[j] == FusedInputKind::kChannel)
      uniform[j] = b.CreateLoad(f32, body->getArg(static_cast<unsigned>(j)));
  b.CreateCondBr(b.CreateICmpSLT(begin, end), loop, exit);

  b.SetInsertPoint(loop);
  llvm::PHINode* i = b.CreatePHI(i64, 2, "i");
  i->addIncoming(begin, entry);
  std::vector<llvm::Value*> values(static_cast<size_t>(p.num_values()), nullptr);
  for (size_t j = 0; j < k; ++j)
    values[j] = uniform[j] != nullptr
                    ? uniform[j]
                    : b.CreateLoad(f32, b.CreateInBoundsGEP(f32, body->getArg(static_cast<unsigned>(j)), i));
  Emitter e(b);
  for (size_t n = 0; n < p.instrs.size(); ++n) {
    const FusedInstr& ins = p.instrs[n];
    llvm::Value* args[3] = {nullptr, nullptr, nullptr};
    for (int a = 0; a < fused_opcode_arity(ins.op); ++a) {
      const FusedOperand& o = ins.args[static_cast<size_t>(a)];
      args[a] = o.is_value() ? values[static_cast<size_t>(o.value)] : e.c(o.literal);
    }
    values[k + n] = e.instr(ins.op, args[0], args[1], args[2], ins);
  }
  for (size_t o = 0; o < p.outputs.size(); ++o)
    b.CreateStore(values[static_cast<size_t>(p.outputs[o])],
                  b.CreateInBoundsGEP(f32, body->getArg(static_cast<unsigned>(k + o)), i));
  llvm::Value* next = b.CreateAdd(i, b.getInt64(1), "next", true, true);
  i->addIncoming(next, loop);
  llvm::BranchInst* latch = b.CreateCondBr(b.CreateICmpSLT(next, end), loop, exit);
  // One vector iteration per trip: the bodies are long (exp, log and tanh are
  // inline polynomials), and interleaving or unrolling them only adds
  // register pressure and code size.
  {
    auto flag = [&](const char* name, llvm::Metadata* value) {
      std::vector<llvm::Metadata*> ops{llvm::MDString::get(ctx, name)};
      if (value) ops.push_back(value);
      return llvm::MDNode::get(ctx, ops);
    };
    llvm::Metadata* one = llvm::ConstantAsMetadata::get(b.getInt32(1));
    llvm::MDNode* id = llvm::MDNode::getDistinct(
        ctx, {nullptr, flag("llvm.loop.interleave.count", one), flag("llvm.loop.unroll.disable", nullptr)});
    id->replaceOperandWith(0, id);
    latch->setMetadata(llvm::LLVMContext::MD_loop, id);
  }
  b.SetInsertPoint(exit);
  b.CreateRetVoid();

  // f(void** bufs, i64 begin, i64 end)
  llvm::PointerType* vptr = b.getInt8PtrTy();
  auto* f = llvm::Function::Create(llvm::FunctionType::get(b.getVoidTy(), {vptr->getPointerTo(), i64, i64}, false),
                                   llvm::Function::ExternalLinkage, name, module);
  set_target(f);
  b.SetInsertPoint(llvm::BasicBlock::Create(ctx, "entry", f));
  std::vector<llvm::Value*> args;
  for (size_t j = 0; j < num_bufs; ++j) {
    llvm::Value* slot = b.CreateConstInBoundsGEP1_64(vptr, f->getArg(0), j);
    args.push_back(b.CreateBitCast(b.CreateLoad(vptr, slot), fptr));
  }
  args.push_back(f->getArg(1));
  args.push_back(f->getArg(2));
  b.CreateCall(body, args);
  b.CreateRetVoid();
}

void optimize(llvm::Module& module, llvm::TargetMachine& tm) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PassBuilder pb(&tm);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  llvm::ModulePassManager mpm = pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3);
  mpm.run(module, mam);
}

struct Jit {
  std::mutex mu;
  std::unique_ptr<llvm::orc::LLJIT> lljit;
  std::unique_ptr<llvm::TargetMachine> tm;
  std::unordered_map<std::string, FusedLoopFn> cache;
  std::string init_error;
  int next_id = 0;

  Jit() {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    auto jtmb = llvm::orc::JITTargetMachineBuilder::detectHost();
    if (!jtmb) {
      init_error = to_string(jtmb.takeError());
      return;
    }
    jtmb->setCodeGenOptLevel(llvm::CodeGenOpt::Aggressive);
    auto machine = jtmb->createTargetMachine();
    if (!machine) {
      init_error = to_string(machine.takeError());
      return;
    }
    tm = std::move(*machine);
    auto built = llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(std::move(*jtmb)).create();
    if (!built) {
      init_error = to_string(built.takeError());
      return;
    }
    lljit = std::move(*built);
    // powf, and memset/memcpy that the optimizer may introduce, come from the process.
    auto gen = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(lljit->getDataLayout().getGlobalPrefix());
    if (!gen) {
      init_error = to_string(gen.takeError());
      lljit.reset();
      return;
    }
    lljit->getMainJITDylib().addGenerator(std::move(*gen));
  }
};

// Built on first use and never destroyed: compiled code may run until exit.
Jit& jit() {
  static Jit* j = new Jit();
  return *j;
}

}  // namespace

bool available() { return true; }

FusedLoopFn compile_fused(const FusedProgram& program, const std::string& key, std::string* error) {
  Jit& j = jit();
  std::lock_guard lock(j.mu);
  if (auto it = j.cache.find(key); it != j.cache.end()) return it->second;
  if (!j.lljit) {
    *error = "LLVM JIT initialization failed: " + j.init_error;
    return nullptr;
  }
  auto ctx = std::make_unique<llvm::LLVMContext>();
  auto module = std::make_unique<llvm::Module>("kiln_fused", *ctx);
  module->setDataLayout(j.lljit->getDataLayout());
  module->setTargetTriple(j.tm->getTargetTriple().str());
  const std::string name = "kiln_fused_" + std::to_string(j.next_id++);
  build_module(program, *module, name, *j.tm);
  std::string verify_errors;
  llvm::raw_string_ostream os(verify_errors);
  if (llvm::verifyModule(*module, &os)) {
    *error = "internal error: invalid IR for fused program " + key + ": " + os.str();
    return nullptr;
  }
  optimize(*module, *j.tm);
  // KILN_JIT_DUMP=1: print each optimized module (to check that loops vectorize).
  if (const char* dump = std::getenv("KILN_JIT_DUMP"); dump != nullptr && *dump != '\0' && *dump != '0') {
    llvm::errs() << "; fused program " << key << "\n";
    module->print(llvm::errs(), nullptr);
  }
  if (llvm::Error e = j.lljit->addIRModule(llvm::orc::ThreadSafeModule(std::move(module), std::move(ctx)))) {
    *error = to_string(std::move(e));
    return nullptr;
  }
  auto sym = j.lljit->lookup(name);
  if (!sym) {
    *error = to_string(sym.takeError());
    return nullptr;
  }
  auto fn = reinterpret_cast<FusedLoopFn>(static_cast<uintptr_t>(sym->getAddress()));
  j.cache.emplace(key, fn);
  return fn;
}

}  // namespace kiln::cpu::jit
