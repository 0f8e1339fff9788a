// A bounded wait for tests: a test must never hang on a stream that stays silent.

/// Up to `count` elements of `seq`, in order, waiting at most `limit` in all. When
/// the time runs out first the result is empty; when the sequence ends or throws
/// first, what arrived until then.
public func collect<S: AsyncSequence & Sendable>(_ seq: S, count: Int, within limit: Duration) async -> [S.Element] where S.Element: Sendable {
    let (got, inTime) = await gather(seq, upTo: count, within: limit)
    return inTime ? got : []
}

/// Every element of `seq` that arrives within `limit`, in order (what arrived until
/// then when the sequence ends or throws first): for a test that counts what came in
/// a window, where `collect(_:count:within:)` would wait for one too many. The
/// sequence's iterator must end when its task is cancelled, as the library's streams do.
public func collect<S: AsyncSequence & Sendable>(_ seq: S, within limit: Duration) async -> [S.Element] where S.Element: Sendable {
    await gather(seq, upTo: nil, within: limit).elements
}

/// Reads `seq` until it has `count` elements (nil: no end but the sequence's), it
/// ends, or `limit` passes; then the reader, cancelled, hands over what it has, and
/// `inTime` says whether it stopped before the time ran out.
private func gather<S: AsyncSequence & Sendable>(_ seq: S, upTo count: Int?, within limit: Duration) async -> (elements: [S.Element], inTime: Bool)
where S.Element: Sendable {
    await withTaskGroup(of: [S.Element]?.self) { g in
        g.addTask {
            var out: [S.Element] = []
            var it = seq.makeAsyncIterator()
            while count.map({ out.count < $0 }) ?? true, let e = try? await it.next() { out.append(e) }
            return out
        }
        g.addTask { try? await Task.sleep(for: limit); return nil }
        let first = await g.next() ?? nil
        g.cancelAll()
        if let first { return (first, true) }
        return ((await g.next() ?? nil) ?? [], false)
    }
}
