"""Tests of scripts/gpu_verify.sh on a machine without a GPU: argument handling, the no-GPU exit,
and the whole `first` stage against fake binaries (a fake nvidia-smi that lists one GPU, a fake
slidefuse and a fake gpu test binary): which files land in OUT (at most 8, flat), the exit status
when a part fails, and the table printed last.

Run: python3 -m unittest discover -s tests/tools -p 'test_*.py'
"""
import json
import os
import shutil
import subprocess
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "gpu_verify.sh")

FAKE_SF = """#!/bin/sh
case "$1" in
  --help) printf 'usage: slidefuse <command>\\n  train     train\\n%s  version   print the version\\n' "$SF_FAKE_CHECK_LINE" ;;
  version) echo "slidefuse 0.1.0" ;;
  check) shift; while [ $# -gt 0 ]; do [ "$1" = --json ] && echo '{}' > "$2"; shift; done
         echo "first layer beyond tolerance: stem.conv1 fwd"; exit "${SF_FAKE_CHECK_RC:-0}" ;;
  devices) [ "$2" = --help ] && { echo "usage: slidefuse devices [--cudnn-json FILE]"; exit 0; }
           [ "$2" = --cudnn-json ] && echo '{"deviceName": "Fake"}' > "$3"; exit "${SF_FAKE_DEVICES_RC:-0}" ;;
  plan) echo "plan args: $*"; shift; eng=e2; out=
        while [ $# -gt 0 ]; do
          case "$1" in --json) out=$2 ;; --cudnn-device) [ "$2" = gpu ] && eng=${SF_FAKE_HANDLE_ENGINE:-e2} ;; esac; shift
        done
        [ -n "$out" ] && printf '{"cudnn": {"plans": [{"key": "fprop a", "ok": true, "variant": "v", "engine": "e1"}, {"key": "wgrad a", "ok": true, "variant": "v", "engine": "%s"}]}}' "$eng" > "$out"
        echo "2 keys: 2 planned, 0 without a plan"; exit "${SF_FAKE_PLAN_RC:-0}" ;;
  bench) [ "$2" = --help ] && { echo "  ceilings  copy GB/s and GEMM TFLOP/s"; exit 0; }
         if [ "$2" = ceilings ]; then
           echo "  device-to-device copy      3001.2 GB/s  (read + written)"
           echo "  bf16 GEMM (fp32 acc.)       701.5 TFLOP/s (n = 8192)"; exit "${SF_FAKE_CEILINGS_RC:-0}"
         fi
         echo "bench args: $*"
         cfg=; dir=; only=; prev=
         for a in "$@"; do
           [ "$prev" = --configs ] && cfg=$a; [ "$prev" = --json-dir ] && dir=$a; [ "$prev" = --only ] && only=$a; prev=$a
         done
         if [ -n "$cfg" ]; then  # `bench step --configs`: a record and a section of the log per configuration
           sed 's/#.*//' "$cfg" > "$dir/.fake_cfg"; first=; n=0
           emit() {
             name=$1; shift; ms=10.0; case " $* " in *" --pdl "*) ms=9.0 ;; esac
             echo "[$n s] configuration $name${1:+: $*}"; n=$((n + 1))
             case " $* " in *" --dw-fused-bwd "*)
               echo "              n128 64x128 c64->64 k3 s1 g64: dwconv variants: fwd 7 (4ch 2x4 s8x32) of [0.1] ms, fused backward runs, fused overwrite 0.1500 ms" ;; esac
             echo "  batch  128:  12800.0 samples/s    $ms ms/step"
             lay=; [ "$name" = "$first" ] && lay='"ms": 2.0, "floor_ms": 0.5, "gb": 1.0, "fwd_ms": 0.5, "bwd_ms": 1.5'
             case " $* " in *" --layers "*) lay='"ms": 1.5, "floor_ms": 0.5, "gb": 1.0, "fwd_ms": 0.4, "bwd_ms": 1.1' ;; esac
             extra=; [ -n "$lay" ] && extra=', "layers": {"rows": [{"name": "stage2.branch_1_4.0.dw_conv", '"$lay"'}], "total": {}, "conv_plans": []}'
             printf '{"schema": "slidefuse.bench/1", "commit": "c", "device": {"name": "Fake"}, "runs": [{"batch": 128, "mode": "graph", "status": "ok", "median_ms": %s, "p10_ms": %s, "p90_ms": %s, "samples_per_s": 12800.0, "extra": {"config": "%s"}}]%s}' "$ms" "$ms" "$ms" "$name" "$extra" > "$dir/$name.json"
           }
           lost=; rem=
           case " $* " in *" --layers "*) lose=${SF_FAKE_LOSE:-} ;; *) lose= ;; esac  # the first process only
           skipped=; k=0
           while read -r name flags; do
             [ -z "$name" ] && continue
             if [ -z "$first" ]; then first=$name
             else case ",$only," in ,,|*",$name,"*) ;; *) continue ;; esac; fi
             if [ -n "$lost" ]; then rem="$rem${rem:+, }\\"$name\\""; continue; fi
             if [ -n "${SF_FAKE_SKIP_AFTER:-}" ] && [ "$k" -gt "$SF_FAKE_SKIP_AFTER" ]; then
               skipped="$skipped${skipped:+, }\\"$name\\""; continue
             fi
             k=$((k + 1))
             emit "$name" $flags
             [ "$name" = "$lose" ] && lost=1
           done < "$dir/.fake_cfg"
           rm -f "$dir/.fake_cfg"
           if [ -n "$lost" ]; then
             echo "[$n s] the CUDA context is lost after $lose (cudaErrorIllegalAddress: an illegal memory access)"
             printf '{"context_lost": {"after": "%s"}, "remaining": [%s]}' "$lose" "$rem" > "$dir/configs_summary.json"
             exit 3
           fi
           if [ -n "$skipped" ]; then  # the deadline: the rest and the base's second run listed as skipped
             echo "[$n s] skipped, the deadline being near"
             printf '{"runs": [], "skipped": [%s, "%s_again"]}' "$skipped" "$first" > "$dir/configs_summary.json"
             exit 0
           fi
           emit "${first}_again"
           echo "base $first: 10.000 ms per step first, 10.000 ms again at the end (+0.00%)"; exit "${SF_FAKE_BENCH_RC:-0}"
         fi
         ms=10.0; case " $* " in *" --pdl "*) ms=9.0 ;; esac
         case " $* " in *" --dw-fused-bwd "*)
           echo "              n128 64x128 c64->64 k3 s1 g64: dwconv variants: fwd 7 (4ch 2x4 s8x32) of [0.1] ms, fused backward runs, fused overwrite 0.1500 ms" ;; esac
         shift; while [ $# -gt 0 ]; do [ "$1" = --json ] && printf '{"schema": "slidefuse.bench/1", "commit": "c", "device": {"name": "Fake"}, "runs": [{"batch": 128, "mode": "graph", "status": "ok", "median_ms": %s, "p10_ms": %s, "p90_ms": %s, "samples_per_s": 12800.0, "extra": {}}]}' "$ms" "$ms" "$ms" > "$2"; shift; done
         echo "[slidefuse info] CUDA backend: GPU 0 Fake (sm_90), cuDNN 9.19.0 loaded"
         echo "  batch   16:   1234.5 samples/s   12.960 ms/step"; exit "${SF_FAKE_BENCH_RC:-0}" ;;
  train) out=; prev=
         for a in "$@"; do [ "$prev" = --out ] && out=$a; prev=$a; done
         mkdir -p "$out"; echo "$*" > "$out/args.txt"; echo "train args: $*"
         echo '{"step": 1, "grad_norm": 1.0}' >> "$out/metrics.jsonl"; echo png > "$out/metrics.png"
         mkdir -p "$out/checkpoints"; echo ckpt > "$out/checkpoints/best.safetensors"; echo "model: {}" > "$out/config.resolved.yaml"
         n=$(ls "$out/checkpoints" | grep -c '^ckpt-'); echo ckpt > "$out/checkpoints/ckpt-0000000$((n + 1)).safetensors"
         echo "done: 1 steps" ;;
  export) ck=; out=; prev=
          for a in "$@"; do [ "$prev" = --checkpoint ] && ck=$a; [ "$prev" = --out ] && out=$a; prev=$a; done
          [ -f "$ck" ] || exit 1; echo "weights of $ck" > "$out"; echo "wrote $out" ;;
  generate) prev=; for a in "$@"; do
              [ "$prev" = --preview ] && echo png > "$a"; [ "$prev" = --out ] && mkdir -p "$a/val"; prev=$a; done
            echo "generated" ;;
  eval) out=; csv=; be=; prev=; bn=running; ck=
        for a in "$@"; do
          [ "$prev" = --out ] && out=$a; [ "$prev" = --csv ] && csv=$a; [ "$prev" = --bn-stats ] && bn=$a
          [ "$prev" = --checkpoint ] && ck=$a
          case "$a" in train.backend=*) be=${a#train.backend=} ;; esac; prev=$a
        done
        [ -f "$ck" ] || { echo "no such checkpoint $ck" >&2; exit 1; }
        shift_px=0; [ "$be" = cpu ] && shift_px=${SF_FAKE_CPU_SHIFT:-0}
        case " $* " in *" --bf16-floor "*) shift_px=${SF_FAKE_FLOOR_SHIFT:-$shift_px} ;; esac
        h2=90.0; [ "$bn" = batch ] && h2=85.5
        printf '{"backend": "%s", "bn_stats": "%s", "checkpoint_epoch": 6, "checkpoint_step": 2808, "batch_size": 128, "samples": 4, "mae_px": 1.0, "rmse_px": 1.5, "hit_le_2px": %s, "hit_le_5px": 99.5, "gap_mae": 1.0, "slider_mae": 1.0}' "$be" "$bn" "$h2" > "$out"
        [ -n "$csv" ] && { echo "sample,gap_x,gap_y,slider_x,slider_y,pred_gap_x,pred_gap_y,pred_slider_x,pred_slider_y,combined_err"
          for i in 0 1 2 3; do echo "$i,10,20,30,40,$((10 + shift_px)),20,30,40,0.5"; done; } > "$csv"
        echo "eval $be: 4 samples"; exit "${SF_FAKE_EVAL_RC:-0}" ;;
  predict) out=; be=; prev=; imgs=
           for a in "$@"; do
             [ "$prev" = --json ] && out=$a
             case "$a" in train.backend=*) be=${a#train.backend=} ;; *.png) imgs="$imgs $a" ;; esac; prev=$a
           done
           sep=; printf '{"predictions": [' > "$out"
           for i in $imgs; do
             printf '%s{"image": "%s", "gap": {"x": 50.0, "y": 20.0}, "slider": {"x": 10.0, "y": 20.0}}' "$sep" "$i" >> "$out"; sep=,
           done
           echo ']}' >> "$out"; echo "predict $be" ;;
  *) exit 1 ;;
esac
"""

FAKE_NCU = """#!/bin/sh
log=; prev=; metrics=
for a in "$@"; do [ "$prev" = --log-file ] && log=$a; [ "$prev" = --metrics ] && metrics=$a; prev=$a; done
case "$metrics" in *gpu__time_duration.sum*dram__bytes_read.sum*) ;; *) echo "fake ncu: --metrics '$metrics'" >&2; exit 1 ;; esac
cat > "$log" <<'CSV'
==PROF== Connected to process 1
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","gpu__time_duration.sum","dram__bytes_read.sum","dram__bytes_write.sum"
"","","","","","","","","","","","nsecond","byte","byte"
"0","1","slidefuse","h","void kern::(anonymous namespace)::dwconv3x3_forward_kernel<1, 8, 2, 4, (kern::Act)0, false>(kern::DwConvPlan, const __nv_bfloat16 *)","1","7","(128, 1, 1)","(8192, 1, 1)","0","9.0","200000","134000000","134000000"
"1","1","slidefuse","h","sm90_xmma_fprop_implicit_gemm_bf16(Params)","1","7","(128, 1, 1)","(1024, 1, 1)","0","9.0","100000","50000000","25000000"
CSV
echo "fake ncu profiled"
"""

FAKE_TESTS = """#!/bin/sh
for a in "$@"; do case "$a" in --gtest_list_tests) printf 'Fake.\\n  One\\n  Two\\n  Three\\n'; exit 0 ;; esac; done
echo "fake tests: $*"
three='{"name": "Three", "status": "RUN", "result": "COMPLETED", "time": "0s"}'
[ "${SF_FAKE_TESTS_RC:-0}" = 0 ] || three='{"name": "Three", "status": "RUN", "result": "COMPLETED", "time": "0s", "failures": [{"failure": "fake failure", "type": ""}]}'
for a in "$@"; do case "$a" in --gtest_output=json:*)
  echo '{"tests": 3, "failures": 0, "testsuites": [{"name": "Fake", "tests": 3, "testsuite": [
    {"name": "One", "status": "RUN", "result": "COMPLETED", "time": "0s"},
    {"name": "Two", "status": "RUN", "result": "COMPLETED", "time": "0s"}, '"$three"']}]}' > "${a#--gtest_output=json:}" ;; esac; done
echo "[==========] 3 tests ran."
echo "[  PASSED  ] 3 tests."
exit "${SF_FAKE_TESTS_RC:-0}"
"""


def session_configs():
    """The configuration names of configs/bench/session_ab.txt, in order."""
    names = []
    with open(os.path.join(ROOT, "configs", "bench", "session_ab.txt")) as f:
        for line in f:
            words = line.split("#", 1)[0].split()
            if words:
                names.append(words[0])
    return names


def write_exe(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o755)


class GpuScriptCase(unittest.TestCase):
    """The fakes (a GPU, slidefuse, the gpu test binary) in a temporary build folder, and the scripts' runners;
    no tests of its own (tests/tools/test_gpu_session.py shares it)."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.build = os.path.join(self.tmp, "build")
        os.makedirs(os.path.join(self.build, "tests"))
        write_exe(os.path.join(self.build, "slidefuse"), FAKE_SF)
        write_exe(os.path.join(self.build, "tests", "sf_gpu_tests"), FAKE_TESTS)
        self.bin = os.path.join(self.tmp, "bin")
        os.makedirs(self.bin)
        self.out = os.path.join(self.tmp, "out")

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def fake_gpu(self, present):
        body = 'echo "GPU 0: Fake GPU (UUID: GPU-0)"' if present else "echo 'No devices were found'; exit 6"
        write_exe(os.path.join(self.bin, "nvidia-smi"), "#!/bin/sh\n" + body + "\n")

    def run_script(self, *args, **env):
        e = dict(os.environ)
        e["PATH"] = self.bin + ":" + e["PATH"]
        e["OUT"] = self.out
        e["SF_SANITIZER"] = "none"
        e.update(env)
        return subprocess.run(["bash", SCRIPT, *args], capture_output=True, text=True, env=e, timeout=120)

    def run_session(self, timeout=200, **env):
        """scripts/gpu_session.sh on the fake GPU with a 100 s deadline, env added."""
        e = dict(os.environ, PATH=self.bin + ":" + os.environ["PATH"], OUT=self.out, SF_SANITIZER="none",
                 SF_DEADLINE="100")
        e.update(env)
        return subprocess.run(["bash", os.path.join(ROOT, "scripts", "gpu_session.sh"), self.build],
                              capture_output=True, text=True, env=e, timeout=timeout)



class GpuVerifyTest(GpuScriptCase):
    def test_usage(self):
        r = self.run_script()
        self.assertEqual(r.returncode, 64)
        self.assertIn("usage", r.stderr)
        r = self.run_script("frist", self.build)
        self.assertEqual(r.returncode, 64)
        self.assertIn("unknown stage 'frist'", r.stderr)
        r = self.run_script("first", self.build, "extra")
        self.assertEqual(r.returncode, 64)
        self.assertEqual(self.run_script("--help").returncode, 0)

    def test_missing_build(self):
        r = self.run_script("first", os.path.join(self.tmp, "nope"))
        self.assertEqual(r.returncode, 1)
        self.assertIn("no ", r.stderr)

    def test_no_gpu(self):
        self.fake_gpu(False)
        r = self.run_script("first", self.build)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("no GPU", r.stdout)
        self.assertTrue(os.path.exists(os.path.join(self.out, "env.txt")))
        with open(os.path.join(self.out, "summary.txt")) as f:
            table = f.read()
        for part in ("plans", "tests", "check", "memcheck", "ceilings", "bench"):
            self.assertRegex(table, part + r" +SKIP")
        self.assertEqual(self.run_script("bench", self.build).returncode, 2)

    def test_first_with_fake_gpu(self):
        self.fake_gpu(True)
        r = self.run_script("first", self.build, SF_FAKE_CHECK_LINE="  check     per-layer check\n")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        files = sorted(os.listdir(self.out))
        self.assertLessEqual(len(files), 8, files)
        for f in files:
            self.assertTrue(os.path.isfile(os.path.join(self.out, f)), f)
        for f in ("env.txt", "gpu_tests.json", "gpu_tests.log", "check.json", "bench.json", "summary.txt"):
            self.assertIn(f, files)
        last = r.stdout.strip().splitlines()
        self.assertTrue(last[-1].startswith("bench"), last[-5:])  # the table comes last
        self.assertRegex(r.stdout, r"tests +ok .*rc 0/0; main: 3 passed, 0 failed, 0 skipped, 0 not run; "
                                   r"reference: 3 passed, 0 failed, 0 skipped, 0 not run")
        self.assertRegex(r.stdout, r"probe +SKIP .*no tests/sf_suite_probe")
        # The suite as two processes (the CPU-reference oracles beside the rest), their records merged.
        with open(os.path.join(self.out, "gpu_tests.json")) as f:
            merged = json.load(f)
        self.assertEqual(merged["tests"], 6)
        self.assertEqual([p["record"] for p in merged["parts"]], ["complete", "complete"])
        self.assertEqual([p["gtest_filter"] for p in merged["parts"]],
                         ["-CudaStep.*CpuReference*:CudaStep.FiftyStep*", "CudaStep.*CpuReference*:CudaStep.FiftyStep*"])
        with open(os.path.join(self.out, "gpu_tests.log")) as f:
            tlog = f.read()
        self.assertIn("fake tests: --gtest_filter=-CudaStep.*CpuReference*:CudaStep.FiftyStep*", tlog)
        self.assertIn("== the CPU-reference tests (--gtest_filter=CudaStep.*CpuReference*:CudaStep.FiftyStep*), "
                      "run beside the others: rc 0", tlog)
        self.assertIn("fake tests: --gtest_filter=CudaStep.*CpuReference*:CudaStep.FiftyStep*", tlog)
        self.assertIn("3 of the 3 tests not in docs/gpu/2026-11-27-h200/1-session/first/gpu_tests.json run first", tlog)
        self.assertRegex(r.stdout, r"check +ok")
        self.assertRegex(r.stdout, r"memcheck +SKIP .*no compute-sanitizer")
        self.assertRegex(r.stdout, r"bench +ok .*1234\.5 samples/s")
        self.assertRegex(r.stdout, r"plans +ok .*rc 0/0; 2/2 keys planned from the JSON, 2/2 from the handle, same plan for 2")
        self.assertRegex(r.stdout, r"ceilings +ok .*3001\.2 GB/s,701\.5 TFLOP/s")
        with open(os.path.join(self.out, "env.txt")) as f:
            env = f.read()
        self.assertIn("CUDA backend: GPU 0 Fake", env)
        self.assertIn('== cudnn device properties (slidefuse devices --cudnn-json)\n{"deviceName": "Fake"}', env)

    def test_first_runs_the_tests_the_last_record_lacks_first(self):
        self.fake_gpu(True)
        seen = os.path.join(self.tmp, "seen.json")
        with open(seen, "w") as f:
            json.dump({"testsuites": [{"name": "Fake", "testsuite": [{"name": "One", "status": "RUN"}]}]}, f)
        r = self.run_script("first", self.build, SF_TESTS_SEEN=seen)
        self.assertRegex(r.stdout, r"tests +ok .*rc 0/0; main: 3 passed")
        with open(os.path.join(self.out, "gpu_tests.log")) as f:
            tlog = f.read()
        self.assertIn("fake tests: --gtest_filter=Fake.Two:Fake.Three ", tlog)  # the one binary run: its JSON has all three
        self.assertNotIn("--gtest_filter=Fake.One ", tlog)
        r = self.run_script("first", self.build, SF_TESTS_SEEN="")  # gtest's own order
        with open(os.path.join(self.out, "gpu_tests.log")) as f:  # appended to: the second run's part
            self.assertNotIn("run first", f.read().split("== tests (limit")[-1])

    def test_first_reports_failures_and_missing_check(self):
        self.fake_gpu(True)
        r = self.run_script("first", self.build, SF_FAKE_TESTS_RC="1")
        self.assertEqual(r.returncode, 1)
        self.assertRegex(r.stdout, r"tests +FAIL +\d+ +rc 1")
        self.assertRegex(r.stdout, r"check +SKIP .*no 'slidefuse check'")
        r = self.run_script("first", self.build, SF_FAKE_CHECK_LINE="  check     per-layer check\n",
                            SF_FAKE_CHECK_RC="3")
        self.assertEqual(r.returncode, 1)
        self.assertRegex(r.stdout, r"check +FAIL .*beyond tolerance")
        r = self.run_script("first", self.build, SF_FAKE_PLAN_RC="1")
        self.assertEqual(r.returncode, 1)
        self.assertRegex(r.stdout, r"plans +FAIL +\d+ +rc 1/1")
        r = self.run_script("first", self.build, SF_FAKE_HANDLE_ENGINE="e9",
                            SF_FAKE_CHECK_LINE="  check     per-layer check\n")
        self.assertEqual(r.returncode, 0, r.stdout)  # a different engine is reported, not a failure
        self.assertRegex(r.stdout, r"plans +ok .*same plan for 1")
        r = self.run_script("first", self.build, SF_FAKE_DEVICES_RC="2")
        self.assertEqual(r.returncode, 1)
        self.assertRegex(r.stdout, r"plans +FAIL .*devices --cudnn-json failed")

    def test_sanitizer_refusing_the_device_is_a_skip(self):
        self.fake_gpu(True)
        san = os.path.join(self.bin, "compute-sanitizer")
        write_exe(san, "#!/bin/sh\necho '========= Error: Device not supported'\nexit 1\n")
        r = self.run_script("first", self.build, SF_SANITIZER=san, SF_FAKE_CHECK_LINE="  check     per-layer check\n")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertRegex(r.stdout, r"memcheck +SKIP .*does not support this machine")
        write_exe(san, "#!/bin/sh\necho '========= ERROR SUMMARY: 2 errors'\nexit 86\n")
        r = self.run_script("first", self.build, SF_SANITIZER=san, SF_FAKE_CHECK_LINE="  check     per-layer check\n")
        self.assertEqual(r.returncode, 1)
        self.assertRegex(r.stdout, r"memcheck +FAIL .*rc 86; ERROR SUMMARY: 2 errors")

    def test_tests_stage_runs_the_suite_through_the_runner(self):
        self.fake_gpu(True)
        r = self.run_script("tests", self.build)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with open(os.path.join(self.out, "gpu_tests.json")) as f:
            doc = json.load(f)
        self.assertEqual(doc["runner"]["listed"], 3)
        self.assertEqual([p["outcome"] for p in doc["runner"]["processes"]], ["finished"])
        self.assertIn("suite_runner: 3 tests: 3 passed, 0 failed, 0 skipped, 0 not run; 1 process", r.stdout)
        r = self.run_script("tests", self.build, SF_GTEST_FILTER="Fake.One:Fake.Two")
        self.assertIn("fake tests: --gtest_filter=Fake.One:Fake.Two", r.stdout)
        r = self.run_script("tests", self.build, SF_FAKE_TESTS_RC="1")
        self.assertEqual(r.returncode, 1)
        with open(os.path.join(self.out, "gpu_tests.json")) as f:
            self.assertEqual(json.load(f)["runner"]["failed"], ["Fake.Three"])

    def test_train_stage_keeps_the_run_out_of_out_and_resumes(self):
        self.fake_gpu(True)
        cwd = os.path.join(ROOT, "runs", "gpu_verify_train")
        shutil.rmtree(cwd, ignore_errors=True)
        try:
            for _ in range(2):  # the second call resumes the same run folder
                r = self.run_script("train", self.build)
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertEqual(sorted(os.listdir(self.out)), ["best_weights.safetensors", "commit.txt", "gpu.txt",
                                                             "last_weights.safetensors", "train.log",
                                                             "train_config.resolved.yaml", "train_curves.png",
                                                             "train_metrics.jsonl"])
            with open(os.path.join(self.out, "best_weights.safetensors")) as f:
                self.assertIn("checkpoints/best.safetensors", f.read())
            with open(os.path.join(self.out, "last_weights.safetensors")) as f:  # the newest of the two calls'
                self.assertIn("checkpoints/ckpt-00000002.safetensors", f.read())
            with open(os.path.join(self.out, "train_metrics.jsonl")) as f:
                self.assertEqual(len(f.read().splitlines()), 2)
            with open(os.path.join(cwd, "args.txt")) as f:
                self.assertIn("--resume auto", f.read())
        finally:
            shutil.rmtree(cwd, ignore_errors=True)

    def test_fused_stage_benches_both_variants(self):
        self.fake_gpu(True)
        r = self.run_script("fused", self.build)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(sorted(os.listdir(self.out)), ["bench_fuse_off.json", "bench_fuse_on.json", "commit.txt",
                                                         "fused.log", "fusion_graphs.json", "gpu.txt"])
        with open(os.path.join(self.out, "fused.log")) as f:
            log = f.read().splitlines()
        runs = [l for l in log if l.startswith("bench args:")]
        self.assertIn("--fusion-graphs --time", [l for l in log if l.startswith("plan args:")][0])
        self.assertEqual(len(runs), 2)
        self.assertNotIn("--fuse-expand-dw", runs[0])
        self.assertIn("--fuse-expand-dw", runs[1])
        for a in runs:
            self.assertIn("--batch-sizes 128 --size 256x512", a)
            self.assertIn("--layers --layers-batch 128", a)

    def test_evalcmp_compares_cuda_and_cpu(self):
        self.fake_gpu(True)
        # The stage reads runs/gpu_verify_train under the repository root (where `train` leaves it).
        run_ckpts = os.path.join(ROOT, "runs", "gpu_verify_train", "checkpoints")
        existed = os.path.exists(run_ckpts)
        if existed:
            self.skipTest("runs/gpu_verify_train exists in this checkout; not touching it")
        os.makedirs(run_ckpts)
        try:
            r = self.run_script("evalcmp", self.build)
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            self.assertIn("no checkpoint", r.stderr)
            with open(os.path.join(run_ckpts, "best.safetensors"), "w") as f:
                f.write("x")
            r = self.run_script("evalcmp", self.build)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("backend_compare: PASS", r.stdout)
            for name in ("evalcmp.json", "evalcmp.log", "eval_cuda.json", "eval_cuda.csv", "eval_cpu.csv",
                         "eval_floor.csv"):
                self.assertTrue(os.path.exists(os.path.join(self.out, name)), name)
            self.assertLessEqual(len(os.listdir(self.out)), 8)
            self.assertIn("bf16 floor", r.stdout)
            # CPU predictions 5 px away from CUDA's (the floor with them): every sample disagrees -> exit 1.
            r = self.run_script("evalcmp", self.build, SF_FAKE_CPU_SHIFT="5")
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            self.assertIn("FAIL (eval_agree)", r.stdout)
            # The same, but rounding alone moves every sample as far: the floor allows it -> pass.
            r = self.run_script("evalcmp", self.build, SF_FAKE_CPU_SHIFT="5", SF_FAKE_FLOOR_SHIFT="0")
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("backend_compare: PASS", r.stdout)
        finally:
            shutil.rmtree(os.path.join(ROOT, "runs", "gpu_verify_train"))

    def test_bnstats_evaluates_best_and_last_both_ways(self):
        self.fake_gpu(True)
        run_ckpts = os.path.join(ROOT, "runs", "gpu_verify_train", "checkpoints")
        if os.path.exists(run_ckpts):
            self.skipTest("runs/gpu_verify_train exists in this checkout; not touching it")
        os.makedirs(run_ckpts)
        try:
            r = self.run_script("bnstats", self.build)
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            self.assertIn("no checkpoint", r.stderr)
            for name in ("best.safetensors", "ckpt-00000001.safetensors", "ckpt-00000002.safetensors"):
                with open(os.path.join(run_ckpts, name), "w") as f:
                    f.write("x")
            r = self.run_script("bnstats", self.build)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertEqual(sorted(os.listdir(self.out)), [
                "bnstats.log", "bnstats.md", "bnstats_best_batch.json", "bnstats_best_running.json",
                "bnstats_last_batch.json", "bnstats_last_running.json", "commit.txt", "gpu.txt"])
            with open(os.path.join(self.out, "bnstats.log")) as f:
                log = f.read()
            self.assertIn("last: runs/gpu_verify_train/checkpoints/ckpt-00000002.safetensors", log)
            with open(os.path.join(self.out, "bnstats.md")) as f:
                table = f.read().splitlines()
            self.assertEqual(len(table), 6)
            self.assertEqual(table[2], "| best | 6 | 2808 | running | 128 | 1.000 | 90.00% | 99.50% | 1.000 | 1.000 | 4 |")
            self.assertEqual(table[5], "| last | 6 | 2808 | batch | 128 | 1.000 | 85.50% | 99.50% | 1.000 | 1.000 | 4 |")
            # A failing eval fails the stage.
            r = self.run_script("bnstats", self.build, SF_FAKE_EVAL_RC="1")
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        finally:
            shutil.rmtree(os.path.join(ROOT, "runs", "gpu_verify_train"))

    def test_e2e_trains_and_benches_the_same_kernels(self):
        # SF_CUDA: the config's cuda switches as the training's overrides and the bench's flags.
        self.fake_gpu(True)
        r = self.run_script("e2e", self.build,
                            SF_CUDA="cuda.pw_custom=true cuda.pw_stats=true cuda.bn_row_batch=4 cuda.dw_fused_bwd=true "
                                    "cuda.dw_fused_bn_bwd=true model.fuse_up_bn=true model.merge_heads=true")
        with open(os.path.join(self.out, "e2e.log")) as f:
            log = f.read()
        self.assertIn("bench args: bench step --batch-sizes 128 --size 256x512 --pw-custom --pw-stats --bn-row-batch 4 "
                      "--dw-fused-bwd --dw-fused-bwd-bn --fuse-up-bn --merge-heads --json", log)
        self.assertRegex(log, r"train args: train --config configs/gpu_quick.yaml .* logging.plot=false "
                              r"cuda.pw_custom=true cuda.pw_stats=true cuda.bn_row_batch=4 cuda.dw_fused_bwd=true "
                              r"cuda.dw_fused_bn_bwd=true model.fuse_up_bn=true model.merge_heads=true\n")
        r = self.run_script("e2e", self.build)  # no SF_CUDA: the defaults in both
        with open(os.path.join(self.out, "e2e.log")) as f:
            self.assertIn("bench args: bench step --batch-sizes 128 --size 256x512 --json", f.read())
        r = self.run_script("e2e", self.build, SF_CUDA="cuda.pdl=maybe")
        self.assertEqual(r.returncode, 64)
        self.assertIn("SF_CUDA: 'cuda.pdl=maybe' is not a cuda.KEY=true", r.stderr)

    def test_profile_summarises_the_ncu_csv(self):
        self.fake_gpu(True)
        write_exe(os.path.join(self.bin, "ncu"), FAKE_NCU)
        os.makedirs(self.out)
        with open(os.path.join(self.out, "ceilings.json"), "w") as f:
            f.write('{"copy": {"gbps": 3000.0}}')
        r = self.run_script("profile", self.build, SF_NCU=os.path.join(self.bin, "ncu"))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("dwconv3x3_forward_kernel<1, 8, 2, 4, (kern::Act)0, false>", r.stdout)
        files = sorted(os.listdir(self.out))
        for name in ("ncu_summary.md", "ncu_summary.json", "ncu_raw.csv.gz", "profile.log", "ceilings.json"):
            self.assertIn(name, files)
        self.assertLessEqual(len(files), 8)
        r = self.run_script("profile", self.build, SF_NCU="")
        self.assertEqual(r.returncode, 1)
        self.assertIn("no ncu", r.stdout)

    def test_timeout(self):
        self.fake_gpu(True)
        write_exe(os.path.join(self.build, "tests", "sf_gpu_tests"), "#!/bin/sh\nsleep 30\n")
        r = self.run_script("first", self.build, SF_T_TESTS="1")
        self.assertEqual(r.returncode, 1)
        self.assertRegex(r.stdout, r"tests +FAIL +\d+ +rc 124/124")
        with open(os.path.join(self.out, "gpu_tests.json")) as f:
            merged = json.load(f)
        self.assertEqual(merged["tests"], 0)
        self.assertTrue(all(p["record"].startswith("missing") for p in merged["parts"]), merged["parts"])


if __name__ == "__main__":
    unittest.main()
