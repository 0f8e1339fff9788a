#!/usr/bin/env bash
# Builds the libFuzzer targets (Fuzz/*.swift) over the parser sources and runs each.
#   Scripts/fuzz.sh              bounded smoke run (what Scripts/test.sh does): 20 s per target
#   Scripts/fuzz.sh 600          600 s per target
#   Scripts/fuzz.sh 0 FuzzH4     run one target until it finds something (Ctrl-C to stop)
# Corpora and crashes go to .build-fuzz/<target>/. A crash exits non-zero.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-20}"
only="${2:-}"
out=.build-fuzz
mkdir -p "$out"
# The codec sources only: everything in HCI, L2CAP and Snoop that needs no other package.
hci=$(ls Sources/HCI/*.swift | grep -vE '/(CommandFlow|HCIController|Initialization|Transport|LoopTimer|LoopTaskExecutor|LoopIsolated|FirstElement|BufferedStream|ResumeOnce)\.swift$')
l2cap=$(ls Sources/L2CAP/*.swift Sources/ATT/*.swift | grep -vE "(L2CAPHost|L2CAPHost\+Channels|L2CAPChannel|ATTBearer|ATTChannel)\.swift$")
# The GATT client procedures need only ATT and HCI; their `import ATT` line is dropped.
mkdir -p "$out/src"
gatt=""
for f in Sources/GATT/GATTTypes.swift Sources/GATT/GATTClientProcedures.swift; do
  sed '/^import ATT$/d' "$f" > "$out/src/$(basename "$f")"
  gatt="$gatt $out/src/$(basename "$f")"
done
snoop="Sources/Snoop/ACLReassembly.swift Sources/Snoop/ParameterMeaning.swift Sources/Snoop/TraceRecord.swift Sources/Snoop/TraceFormat.swift Sources/Snoop/JSON.swift Sources/Snoop/JSONDocument.swift Sources/Snoop/FrameOutput.swift"
# The frame decoder names signaling fields with L2CAP's types and decodes ATT and SMP
# with their PDU codecs (SMP's needs only HCI); its `import L2CAP`/`ATT`/`SMP` are
# dropped too.
for f in FrameDecoder FrameDecoder+ATT FrameDecoder+Advertising FrameDecoder+L2CAP ChannelTable; do
  sed -e '/^import L2CAP$/d' -e '/^import ATT$/d' -e '/^import SMP$/d' "Sources/Snoop/$f.swift" > "$out/src/$f.swift"
  snoop="$snoop $out/src/$f.swift"
done
snoop="$snoop Sources/SMP/SMPPDU.swift"
# The SMP pairing session needs the security toolbox: BLECrypto and swift-crypto come
# from the debug build (`swift build`), linked uninstrumented; the SMP sources that do
# no I/O join the module (their `import HCI` refers to it).
# The GATT server's state needs the same toolbox (signed writes, the database hash); its
# sources join the module with their `import ATT` dropped.
gattserver=""
for f in Sources/GATT/AttributeDatabase.swift Sources/GATT/GATTServerState.swift Sources/GATT/MandatoryServices.swift; do
  sed '/^import ATT$/d' "$f" > "$out/src/$(basename "$f")"
  gattserver="$gattserver $out/src/$(basename "$f")"
done
smp="Sources/SMP/PairingMethod.swift Sources/SMP/Keys.swift Sources/SMP/PairingSession.swift Sources/SMP/PairingConfiguration.swift Sources/SMP/OOB.swift Sources/SMP/Bond.swift Sources/SMP/Privacy.swift"
debug=$(swift build --show-bin-path 2>/dev/null || echo .build/debug)
crypto_objects() {
  find "$debug"/{BLECrypto,Crypto,_CryptoExtras,CCryptoBoringSSL,CCryptoBoringSSLShims,CryptoBoringWrapper,SwiftASN1}.build -name '*.o' 2>/dev/null
}
crypto_flags=(-I "$debug/Modules"
  -Xcc -fmodule-map-file=.build/checkouts/swift-crypto/Sources/CCryptoBoringSSL/include/module.modulemap
  -Xcc -fmodule-map-file=.build/checkouts/swift-crypto/Sources/CCryptoBoringSSLShims/include/module.modulemap
  -Xcc -fmodule-map-file="$debug/CryptoBoringWrapper.build/include/module.modulemap"
  -Xcc -fmodule-map-file="$debug/Crypto.build/include/module.modulemap"
  -Xcc -fmodule-map-file="$debug/_CryptoExtras.build/include/module.modulemap"
  -Xcc -fmodule-map-file="$debug/BLECrypto.build/include/module.modulemap")
status=0
for src in Fuzz/Fuzz*.swift; do
  name=$(basename "$src" .swift)
  [ -n "$only" ] && [ "$only" != "$name" ] && continue
  mkdir -p "$out/$name/corpus"
  extra=()
  if [ "$name" = FuzzSMP ] || [ "$name" = FuzzGATTServer ]; then
    [ -f "$debug/Modules/BLECrypto.swiftmodule" ] || swift build --target BLECrypto >/dev/null
    mapfile -t objects < <(crypto_objects)
    sources=$smp
    [ "$name" = FuzzGATTServer ] && sources=$gattserver
    # shellcheck disable=SC2206
    extra=($sources "${crypto_flags[@]}" "${objects[@]}" -lstdc++)
  fi
  # One module; the `import HCI` lines in Snoop sources refer to it and are ignored.
  swiftc -O -sanitize=fuzzer,address -parse-as-library -module-name HCI -package-name swiftble -suppress-warnings \
    $hci $l2cap $gatt $snoop "${extra[@]}" "$src" -o "$out/$name/$name" 2> >(grep -v "Cannot export local symbol" >&2)
  cp Fixtures/*.btsnoop "$out/$name/corpus/" 2>/dev/null || true
  # The JSON reader starts from the documents we ship: the example database, the schemas.
  if [ "$name" = FuzzJSON ]; then cp docs/examples/*.json docs/schemas/*.json "$out/$name/corpus/"; fi
  if [ "$name" = FuzzGATTServer ]; then
    # A first input: Battery Level (0x2A19) read by type three times and by Read
    # Multiple, so each of its three answers is met; then, on a secure link, every handle
    # prepared (2 octets) and executed, written and read. Records are a control byte, a
    # length and the PDU.
    { printf '\x00'
      printf '\x00\x07\x08\x01\x00\xff\xff\x19\x2a%.0s' 1 2 3
      printf '\x00\x05\x0e\x12\x00\x01\x00'
      for h in $(seq 1 40); do
        hx=$(printf '\\x%02x' "$h")
        printf "\x0e\x07\x16${hx}\x00\x00\x00\x01\x00\x0e\x02\x18\x01\x0e\x05\x12${hx}\x00\x01\x00\x0e\x03\x0a${hx}\x00"
      done; } > "$out/$name/corpus/tour"
  fi
  args=(-artifact_prefix="$out/$name/" -print_final_stats=0)
  [ -f "Fuzz/$name.dict" ] && args+=(-dict="Fuzz/$name.dict")
  [ "$seconds" != 0 ] && args+=(-max_total_time="$seconds")
  echo "fuzz: $name for ${seconds}s"
  if ! "$out/$name/$name" "${args[@]}" "$out/$name/corpus" 2>"$out/$name/log.txt"; then
    echo "fuzz: $name FAILED; see $out/$name/log.txt and the crash-* file beside it" >&2
    tail -30 "$out/$name/log.txt" >&2
    status=1
  else
    grep -E '^(#[0-9]+|Done)' "$out/$name/log.txt" | tail -1 || true
  fi
done
exit $status
