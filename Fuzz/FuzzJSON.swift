// libFuzzer target: the strict JSON reader (`JSONDocument`), which reads the files a
// person hands btctl (`gatt serve`'s database) and the frames `trace show --json`
// wrote, on arbitrary bytes. It must end in a value or a `JSONSyntaxError`, never a
// trap; every position it reports (a value's, an error's) lies in the input; a value
// renders (`JSONValue.rendered`, the `--json` output) as JSON that reads back to the
// same rendering; and the schema getters answer for any member.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    let lines = bytes.reduce(1) { $0 + ($1 == 0x0A ? 1 : 0) }
    func inInput(_ line: Int, _ column: Int) -> Bool { (1...lines).contains(line) && (1...(size + 1)).contains(column) }
    let root: JSONNode
    do {
        root = try JSONDocument.parse(bytes)
    } catch {
        precondition(inInput(error.line, error.column), "error at \(error.line):\(error.column) outside \(lines) lines")
        return 0
    }
    func check(_ n: JSONNode, depth: Int) {
        precondition(depth < JSONDocument.maximumDepth, "nested \(depth) deep")
        precondition(inInput(n.line, n.column), "value at \(n.position) outside \(lines) lines")
        switch n.value {
        case let .array(a): for e in a { check(e, depth: depth + 1) }
        case let .object(m):
            precondition(Set(m.map(\.key)).count == m.count, "a key twice in one object")
            for e in m {
                precondition(inInput(e.line, e.column), "key at \(e.line):\(e.column) outside \(lines) lines")
                check(e.value, depth: depth + 1)
            }
        default: break
        }
    }
    check(root, depth: 0)
    let once = JSONValue(root).rendered
    guard let again = try? JSONValue(parsing: Array(once.utf8)) else { preconditionFailure("rendered JSON does not parse: \(once)") }
    precondition(again.rendered == once, "rendering changed on reading back: \(once) → \(again.rendered)")
    if let o = try? JSONObjectReader(root, path: "") {
        _ = try? o.allowOnly(["name", "services"])
        _ = try? o.string("name")
        _ = try? o.bool("primary")
        _ = try? o.int("maxLength", in: 0...512)
        _ = try? o.strings("services")
    }
    return 0
}
