import HCI
import Testing
@testable import L2CAP

@Suite(.timeLimit(.minutes(3)))
struct FragmentationTests {
    @Test(arguments: [1, 4, 27, 251, 1000])
    func fragmentsReassembleToTheSameFrame(size: Int) {
        let frame = BasicFrame(channel: .att, payload: (0..<300).map { UInt8($0 & 0xFF) })
        let fragments = frame.fragments(handle: 0x40, maximumDataLength: size)
        #expect(fragments.allSatisfy { $0.data.count <= size && $0.handle == 0x40 })
        #expect(fragments.first?.boundary == .firstNonFlushable)
        #expect(fragments.dropFirst().allSatisfy { $0.boundary == .continuing })
        var r = Reassembler()
        var out: [BasicFrame] = []
        for f in fragments {
            let (frame, errors) = r.receive(f)
            #expect(errors.isEmpty)
            if let frame { out.append(frame) }
        }
        #expect(out == [frame])
        #expect(!r.hasPartialFrame(handle: 0x40))
    }

    @Test func basicFrameBytesMatchTheSpecLayout() {
        // Vol 3, Part A, §3.1: length, CID, payload. An ATT Exchange MTU Request (0x02, MTU 517).
        #expect(BasicFrame(channel: .att, payload: [0x02, 0x05, 0x02]).bytes == [0x03, 0x00, 0x04, 0x00, 0x02, 0x05, 0x02])
    }

    @Test func strayContinuationIsReported() {
        var r = Reassembler()
        let (f, e) = r.receive(ACLDataPacket(handle: 1, boundary: .continuing, data: [1, 2]))
        #expect(f == nil)
        #expect(e == [.strayContinuation(handle: 1)])
    }

    @Test func oversizeIsRejectedWithoutBuffering() {
        var r = Reassembler(maximumPayload: 100)
        let (f, e) = r.receive(ACLDataPacket(handle: 1, boundary: .firstFlushable, data: [0xE8, 0x03, 0x04, 0x00, 1]))
        #expect(f == nil)
        #expect(e == [.oversize(handle: 1, declared: 1000, maximum: 100)])
        #expect(!r.hasPartialFrame(handle: 1))
        // The continuation that follows is then stray, not glued to anything.
        #expect(r.receive(ACLDataPacket(handle: 1, boundary: .continuing, data: [2])).errors == [.strayContinuation(handle: 1)])
    }

    @Test func tooManyBytesIsALengthMismatch() {
        var r = Reassembler()
        var (f, e) = r.receive(ACLDataPacket(handle: 2, boundary: .firstFlushable, data: [0x03, 0x00, 0x04, 0x00, 1, 2]))
        #expect(f == nil && e.isEmpty)
        (f, e) = r.receive(ACLDataPacket(handle: 2, boundary: .continuing, data: [3, 4]))
        #expect(f == nil)
        #expect(e == [.lengthMismatch(handle: 2, declared: 3, received: 4)])
    }

    @Test func newStartDropsTheIncompleteFrameAndKeepsTheNewOne() {
        var r = Reassembler()
        _ = r.receive(ACLDataPacket(handle: 3, boundary: .firstFlushable, data: [0x05, 0x00, 0x04, 0x00, 1]))
        let (f, e) = r.receive(ACLDataPacket(handle: 3, boundary: .firstFlushable, data: [0x01, 0x00, 0x06, 0x00, 9]))
        #expect(e == [.incompleteFrameDropped(handle: 3, declared: 5, received: 1)])
        #expect(f == BasicFrame(channel: .securityManager, payload: [9]))
    }

    @Test func headerSplitAcrossFragmentsAndConnectionsInterleaved() {
        var r = Reassembler()
        #expect(r.receive(ACLDataPacket(handle: 1, boundary: .firstFlushable, data: [0x02])).frame == nil)
        #expect(r.receive(ACLDataPacket(handle: 2, boundary: .firstFlushable, data: [0x01, 0x00, 0x05, 0x00, 7])).frame == BasicFrame(channel: .leSignaling, payload: [7]))
        #expect(r.receive(ACLDataPacket(handle: 1, boundary: .continuing, data: [0x00, 0x04])).frame == nil)
        #expect(r.receive(ACLDataPacket(handle: 1, boundary: .continuing, data: [0x00, 0xAA, 0xBB])).frame == BasicFrame(channel: .att, payload: [0xAA, 0xBB]))
        r.disconnected(handle: 1)
        #expect(!r.hasPartialFrame(handle: 1))
    }
}

@Suite(.timeLimit(.minutes(3)))
struct LESignalingTests {
    // Connection Parameter Update Request, identifier 0x07: 30–50 ms, latency 0, 4 s (§4.20).
    static let request: [UInt8] = [0x12, 0x07, 0x08, 0x00, 0x18, 0x00, 0x28, 0x00, 0x00, 0x00, 0x90, 0x01]

    @Test func centralAcceptsValidRequestAndAsksForAConnectionUpdate() {
        var s = LESignalingChannel(role: .central)
        let events = s.receive(Self.request)
        #expect(events == [
            .send([0x13, 0x07, 0x02, 0x00, 0x00, 0x00]),
            .updateConnection(ConnectionParameterUpdate(intervalMin: 0x18, intervalMax: 0x28, latency: 0, timeout: 0x190)),
        ])
    }

    @Test(arguments: [
        ConnectionParameterUpdate(intervalMin: 5, intervalMax: 10, latency: 0, timeout: 100),      // interval below 7.5 ms
        ConnectionParameterUpdate(intervalMin: 40, intervalMax: 30, latency: 0, timeout: 100),     // min > max
        ConnectionParameterUpdate(intervalMin: 6, intervalMax: 6, latency: 500, timeout: 3200),    // latency too high
        ConnectionParameterUpdate(intervalMin: 800, intervalMax: 800, latency: 0, timeout: 100),   // timeout too short for the interval
    ])
    func centralRejectsInvalidParameters(p: ConnectionParameterUpdate) {
        var s = LESignalingChannel(role: .central)
        let cmd = SignalingCommand(code: .connectionParameterUpdateRequest, identifier: 9, data: p.bytes).bytes
        #expect(s.receive(cmd) == [.send([0x13, 0x09, 0x02, 0x00, 0x01, 0x00])])
    }

    @Test func peripheralRejectsARequestAndUnknownCommandsAreRejected() {
        var p = LESignalingChannel(role: .peripheral)
        #expect(p.receive(Self.request) == [.send([0x01, 0x07, 0x02, 0x00, 0x00, 0x00])])
        var c = LESignalingChannel(role: .central)
        #expect(c.receive([0x0A, 0x03, 0x02, 0x00, 0x01, 0x00]) == [.send([0x01, 0x03, 0x02, 0x00, 0x00, 0x00])])
        // Unexpected responses and identifier 0 are ignored, not answered.
        if case .ignored = c.receive([0x13, 0x04, 0x02, 0x00, 0x00, 0x00]).first {} else { Issue.record("answered a response") }
        if case .ignored = c.receive([0x0A, 0x00, 0x00, 0x00]).first {} else { Issue.record("answered identifier 0") }
    }

    @Test func malformedLengthIsRejected() {
        var c = LESignalingChannel(role: .central)
        let events = c.receive([0x12, 0x05, 0x08, 0x00, 0x18, 0x00])
        #expect(events.first == .send([0x01, 0x05, 0x02, 0x00, 0x00, 0x00]))
        #expect(c.receive([0x12]).allSatisfy { if case .ignored = $0 { return true }; return false })
    }

    @Test func peripheralRequestIsAnsweredByIdentifier() {
        var p = LESignalingChannel(role: .peripheral)
        let params = ConnectionParameterUpdate(intervalMin: 0x18, intervalMax: 0x28, latency: 0, timeout: 0x190)
        let (id, bytes) = p.requestParameterUpdate(params)
        #expect(bytes == SignalingCommand(code: .connectionParameterUpdateRequest, identifier: id, data: params.bytes).bytes)
        #expect(p.receive([0x13, id, 0x02, 0x00, 0x01, 0x00]) == [.parameterUpdateAnswered(identifier: id, accepted: false)])
        // A second answer to the same request is unexpected.
        if case .ignored = p.receive([0x13, id, 0x02, 0x00, 0x00, 0x00]).first {} else { Issue.record("answered twice") }
        let (id2, _) = p.requestParameterUpdate(params)
        #expect(id2 != id)
        #expect(p.receive([0x01, id2, 0x02, 0x00, 0x00, 0x00]) == [.rejected(identifier: id2, reason: 0)])
    }
}
