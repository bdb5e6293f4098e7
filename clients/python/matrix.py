"""Real Python AWS clients against a running ackbox (the client matrix).

    python matrix.py boto3 | botocore-query | awscli | boto3-sns | awscli-sns

The endpoint comes from ACKBOX_ENDPOINT, the key from ACKBOX_ACCESS_KEY_ID and
ACKBOX_SECRET_ACCESS_KEY. `botocore-query` loads the query-protocol model of
SQS found under ACKBOX_QUERY_MODEL (clients/setup.sh extracts it from the last
botocore release that spoke query) into the current botocore, so the very
same calls go out form-encoded and come back as XML.
Every step checks what it got; the first wrong answer exits non-zero with the
step's name. Prints one `ok` line per step.
"""

import hashlib
import json
import os
import subprocess
import sys
import time
import uuid

import boto3
import botocore.session
from botocore.exceptions import ClientError

ENDPOINT = os.environ["ACKBOX_ENDPOINT"]
REGION = "us-east-1"
CREDENTIALS = {
    "aws_access_key_id": os.environ.get("ACKBOX_ACCESS_KEY_ID", "matrix"),
    "aws_secret_access_key": os.environ.get("ACKBOX_SECRET_ACCESS_KEY", "matrix-secret-access-key"),
}
NON_EXISTENT_QUEUE = "AWS.SimpleQueueService.NonExistentQueue"


def step(name, condition, got=None):
    if not condition:
        sys.exit(f"FAILED {name}: got {got!r}")
    print(f"ok {name}")


def md5(text):
    return hashlib.md5(text.encode()).hexdigest()


def sdk_client(protocol):
    session = botocore.session.get_session()
    if protocol == "query":
        session.get_component("data_loader").search_paths.insert(
            0, os.environ["ACKBOX_QUERY_MODEL"]
        )
    client = boto3.session.Session(botocore_session=session).client(
        "sqs", endpoint_url=ENDPOINT, region_name=REGION, **CREDENTIALS
    )
    step(
        f"{protocol}: the client speaks {protocol}",
        client.meta.service_model.protocol == protocol,
        client.meta.service_model.protocol,
    )
    return client


def receive_all(sqs, url, count, **options):
    """Receives until `count` messages have arrived (or 10 tries)."""
    messages = []
    for _ in range(10):
        reply = sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1, **options
        )
        messages.extend(reply.get("Messages", []))
        if len(messages) >= count:
            break
    return messages


def sdk_scenario(sqs, tag):
    name = f"matrix-{tag}-{uuid.uuid4().hex[:8]}"

    # Create: a dead-letter queue, and a queue that gives up after one receive.
    dlq = sqs.create_queue(QueueName=f"{name}-dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    step("create: ARN of the dead-letter queue", dlq_arn.endswith(f":{name}-dlq"), dlq_arn)
    url = sqs.create_queue(
        QueueName=name,
        Attributes={
            "VisibilityTimeout": "30",
            "RedrivePolicy": json.dumps(
                {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 1}
            ),
        },
        tags={"team": "matrix"},
    )["QueueUrl"]
    step("create: queue URL", url.endswith(f"/{name}"), url)
    tags = sqs.list_queue_tags(QueueUrl=url).get("Tags")
    step("create: tags", tags == {"team": "matrix"}, tags)

    # Send with attributes of every type; receive them back.
    body = "héllo <&> \r\n \"quoted\""
    sent = sqs.send_message(
        QueueUrl=url,
        MessageBody=body,
        MessageAttributes={
            "kind": {"DataType": "String", "StringValue": "card"},
            "amount": {"DataType": "Number", "StringValue": "42"},
            "blob": {"DataType": "Binary", "BinaryValue": b"\x00\x01\xff"},
        },
    )
    step("send: MD5 of the body", sent["MD5OfMessageBody"] == md5(body), sent)
    step("send: MD5 of the attributes", len(sent.get("MD5OfMessageAttributes", "")) == 32, sent)
    messages = receive_all(
        sqs, url, 1, MessageAttributeNames=["All"], AttributeNames=["All"]
    )
    step("receive: one message", len(messages) == 1, messages)
    message = messages[0]
    step("receive: the body, byte for byte", message["Body"] == body, message["Body"])
    step("receive: MD5 of the body", message["MD5OfBody"] == md5(body), message)
    attributes = message["MessageAttributes"]
    step("receive: string attribute", attributes["kind"]["StringValue"] == "card", attributes)
    step("receive: number attribute", attributes["amount"]["StringValue"] == "42", attributes)
    step(
        "receive: binary attribute",
        attributes["blob"]["BinaryValue"] == b"\x00\x01\xff",
        attributes,
    )
    step(
        "receive: system attributes",
        message["Attributes"]["ApproximateReceiveCount"] == "1"
        and message["Attributes"]["SenderId"] != "",
        message["Attributes"],
    )

    # Change visibility: back at once; the second receive exceeds
    # maxReceiveCount, so the message goes to the dead-letter queue.
    sqs.change_message_visibility(
        QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
    )
    again = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=0).get("Messages", [])
    step("dead-letter: the source no longer delivers it", again == [], again)
    dead = receive_all(sqs, dlq, 1, MessageAttributeNames=["All"])
    step(
        "dead-letter: the message arrived with its attributes",
        len(dead) == 1
        and dead[0]["Body"] == body
        and dead[0]["MessageAttributes"]["kind"]["StringValue"] == "card",
        dead,
    )
    sources = sqs.list_dead_letter_source_queues(QueueUrl=dlq)["queueUrls"]
    step("dead-letter: its source queue is listed", sources == [url], sources)
    sqs.delete_message(QueueUrl=dlq, ReceiptHandle=dead[0]["ReceiptHandle"])

    # Batches.
    entries = [{"Id": f"e{i}", "MessageBody": f"batch {i}"} for i in range(5)]
    batch = sqs.send_message_batch(QueueUrl=url, Entries=entries)
    step(
        "batch: five sent",
        sorted(entry["Id"] for entry in batch["Successful"]) == [f"e{i}" for i in range(5)]
        and not batch.get("Failed"),
        batch,
    )
    messages = receive_all(sqs, url, 5)
    step(
        "batch: five received",
        sorted(message["Body"] for message in messages) == [f"batch {i}" for i in range(5)],
        messages,
    )
    changed = sqs.change_message_visibility_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "good", "ReceiptHandle": messages[0]["ReceiptHandle"], "VisibilityTimeout": 60},
            {"Id": "forged", "ReceiptHandle": "forged-handle", "VisibilityTimeout": 60},
        ],
    )
    step(
        "batch: a forged handle fails alone",
        [entry["Id"] for entry in changed["Successful"]] == ["good"]
        and [(entry["Id"], entry["Code"], entry["SenderFault"]) for entry in changed["Failed"]]
        == [("forged", "ReceiptHandleIsInvalid", True)],
        changed,
    )
    deleted = sqs.delete_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": str(i), "ReceiptHandle": message["ReceiptHandle"]}
            for i, message in enumerate(messages)
        ],
    )
    step(
        "batch: five deleted",
        len(deleted["Successful"]) == 5 and not deleted.get("Failed"),
        deleted,
    )
    depth = sqs.get_queue_attributes(
        QueueUrl=url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    step(
        "batch: the queue is empty",
        depth == {"ApproximateNumberOfMessages": "0", "ApproximateNumberOfMessagesNotVisible": "0"},
        depth,
    )

    # Errors arrive as the client's exceptions, with SQS's codes.
    try:
        sqs.get_queue_url(QueueName=f"{name}-missing")
        step("errors: a missing queue is refused", False)
    except ClientError as error:
        code = error.response["Error"]["Code"]
        step("errors: a missing queue is refused", code == NON_EXISTENT_QUEUE, error.response)

    # FIFO: order within a group, and deduplication.
    fifo = sqs.create_queue(
        QueueName=f"{name}.fifo", Attributes={"FifoQueue": "true"}
    )["QueueUrl"]
    ids = []
    for body, dedup in [("first", "a"), ("second", "b"), ("first again", "a"), ("third", "c")]:
        ids.append(
            sqs.send_message(
                QueueUrl=fifo,
                MessageBody=body,
                MessageGroupId="order-1",
                MessageDeduplicationId=dedup,
            )["MessageId"]
        )
    step("fifo: a duplicate gets the first send's id", ids[2] == ids[0], ids)
    messages = receive_all(sqs, fifo, 3, AttributeNames=["All"])
    step(
        "fifo: one group, in order, deduplicated",
        [message["Body"] for message in messages] == ["first", "second", "third"],
        [message["Body"] for message in messages],
    )
    sequence = [int(message["Attributes"]["SequenceNumber"]) for message in messages]
    step("fifo: sequence numbers increase", sequence == sorted(sequence), sequence)
    step(
        "fifo: group id returned",
        all(message["Attributes"]["MessageGroupId"] == "order-1" for message in messages),
        messages,
    )

    # ackbox's own attribute: a queue that archives what is sent to it.
    archives_before = set(sqs.list_queues(QueueNamePrefix="ackbox-archive-").get("QueueUrls", []))
    archived = sqs.create_queue(
        QueueName=f"{name}-archived",
        Attributes={"AckBoxArchivePolicy": json.dumps({"MessageRetentionPeriod": "2"})},
    )["QueueUrl"]
    policy = sqs.get_queue_attributes(QueueUrl=archived, AttributeNames=["AckBoxArchivePolicy"])
    step(
        "archive: AckBoxArchivePolicy reads back",
        policy["Attributes"] == {"AckBoxArchivePolicy": '{"MessageRetentionPeriod":"2"}'},
        policy,
    )
    sqs.send_message(QueueUrl=archived, MessageBody="kept twice")
    archives = set(sqs.list_queues(QueueNamePrefix="ackbox-archive-").get("QueueUrls", [])) - archives_before
    held = [
        sqs.get_queue_attributes(QueueUrl=archive, AttributeNames=["ApproximateNumberOfMessages"])[
            "Attributes"
        ]["ApproximateNumberOfMessages"]
        for archive in archives
    ]
    step("archive: the send is in the queue's archive", held == ["1"], held)

    for queue in (fifo, url, dlq, archived):
        sqs.delete_queue(QueueUrl=queue)
    remaining = sqs.list_queues(QueueNamePrefix=name).get("QueueUrls", [])
    step("delete: the queues are gone", remaining == [], remaining)
    archives = set(sqs.list_queues(QueueNamePrefix="ackbox-archive-").get("QueueUrls", [])) - archives_before
    step("delete: a queue's archive goes with it", archives == set(), archives)


def aws(*args):
    """Runs `aws sqs …` of this environment; returns its parsed JSON output."""
    return aws_service("sqs", *args)


def aws_sns(*args):
    """Runs `aws sns …` of this environment; returns its parsed JSON output."""
    return aws_service("sns", *args)


def aws_service(service, *args):
    """Runs the `aws` command of this environment; returns its parsed JSON output."""
    command = [os.path.join(os.path.dirname(sys.executable), "aws"), "--endpoint-url", ENDPOINT]
    environment = dict(
        os.environ,
        AWS_ACCESS_KEY_ID=CREDENTIALS["aws_access_key_id"],
        AWS_SECRET_ACCESS_KEY=CREDENTIALS["aws_secret_access_key"],
        AWS_DEFAULT_REGION=REGION,
        AWS_CONFIG_FILE="/dev/null",
        AWS_SHARED_CREDENTIALS_FILE="/dev/null",
    )
    done = subprocess.run(
        command + [service, *args, "--output", "json"],
        capture_output=True,
        text=True,
        env=environment,
        timeout=60,
    )
    if done.returncode != 0:
        return {"error": done.stderr.strip(), "returncode": done.returncode}
    return json.loads(done.stdout) if done.stdout.strip() else {}


def awscli_scenario():
    name = f"matrix-cli-{uuid.uuid4().hex[:8]}"
    dlq = aws("create-queue", "--queue-name", f"{name}-dlq")["QueueUrl"]
    dlq_arn = aws(
        "get-queue-attributes", "--queue-url", dlq, "--attribute-names", "QueueArn"
    )["Attributes"]["QueueArn"]
    redrive = json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 1})
    url = aws(
        "create-queue",
        "--queue-name",
        name,
        "--attributes",
        json.dumps({"RedrivePolicy": redrive}),
    )["QueueUrl"]
    step("create-queue", url.endswith(f"/{name}"), url)
    sent = aws(
        "send-message",
        "--queue-url",
        url,
        "--message-body",
        "from the cli",
        "--message-attributes",
        json.dumps({"kind": {"DataType": "String", "StringValue": "card"}}),
    )
    step("send-message", sent.get("MD5OfMessageBody") == md5("from the cli"), sent)
    received = aws(
        "receive-message",
        "--queue-url",
        url,
        "--message-attribute-names",
        "All",
        "--attribute-names",
        "All",
        "--wait-time-seconds",
        "1",
    )
    messages = received.get("Messages", [])
    step(
        "receive-message",
        len(messages) == 1
        and messages[0]["Body"] == "from the cli"
        and messages[0]["MessageAttributes"]["kind"]["StringValue"] == "card",
        received,
    )
    handle = messages[0]["ReceiptHandle"]
    changed = aws(
        "change-message-visibility",
        "--queue-url",
        url,
        "--receipt-handle",
        handle,
        "--visibility-timeout",
        "0",
    )
    step("change-message-visibility", changed == {}, changed)
    again = aws("receive-message", "--queue-url", url)
    step("dead-letter: gone from the source", again.get("Messages", []) == [], again)
    dead = aws("receive-message", "--queue-url", dlq, "--wait-time-seconds", "1")
    dead_messages = dead.get("Messages", [])
    step(
        "dead-letter: in the dead-letter queue",
        [message["Body"] for message in dead_messages] == ["from the cli"],
        dead,
    )
    deleted = aws(
        "delete-message", "--queue-url", dlq, "--receipt-handle", dead_messages[0]["ReceiptHandle"]
    )
    step("delete-message", deleted == {}, deleted)
    batch = aws(
        "send-message-batch",
        "--queue-url",
        url,
        "--entries",
        json.dumps([{"Id": f"e{i}", "MessageBody": f"batch {i}"} for i in range(3)]),
    )
    step("send-message-batch", len(batch.get("Successful", [])) == 3, batch)
    attributes = aws(
        "get-queue-attributes",
        "--queue-url",
        url,
        "--attribute-names",
        "ApproximateNumberOfMessages",
    )
    step(
        "get-queue-attributes",
        attributes.get("Attributes", {}).get("ApproximateNumberOfMessages") == "3",
        attributes,
    )
    missing = aws("get-queue-url", "--queue-name", f"{name}-missing")
    step(
        "errors: a missing queue is refused",
        missing.get("returncode", 0) != 0 and NON_EXISTENT_QUEUE in missing.get("error", ""),
        missing,
    )
    fifo = aws(
        "create-queue",
        "--queue-name",
        f"{name}.fifo",
        "--attributes",
        json.dumps({"FifoQueue": "true", "ContentBasedDeduplication": "true"}),
    )["QueueUrl"]
    for body in ["one", "two", "one"]:
        aws(
            "send-message",
            "--queue-url",
            fifo,
            "--message-body",
            body,
            "--message-group-id",
            "g",
        )
    fifo_messages = aws(
        "receive-message", "--queue-url", fifo, "--max-number-of-messages", "10"
    ).get("Messages", [])
    step(
        "fifo: in order, deduplicated by content",
        [message["Body"] for message in fifo_messages] == ["one", "two"],
        fifo_messages,
    )
    for queue in (fifo, url, dlq):
        step(f"delete-queue {queue}", aws("delete-queue", "--queue-url", queue) == {})


def sns_scenario():
    """Topics through boto3's SNS client (query protocol, as every SNS client)."""
    sns = boto3.client("sns", endpoint_url=ENDPOINT, region_name=REGION, **CREDENTIALS)
    sqs = boto3.client("sqs", endpoint_url=ENDPOINT, region_name=REGION, **CREDENTIALS)
    step("sns: the client speaks query", sns.meta.service_model.protocol == "query")
    name = f"matrix-sns-{uuid.uuid4().hex[:8]}"
    topic = sns.create_topic(Name=name, Attributes={"DisplayName": "Matrix"})["TopicArn"]
    step("sns create_topic", topic.endswith(f":{name}"), topic)
    step("sns create_topic again is the same topic", sns.create_topic(Name=name)["TopicArn"] == topic)
    envelope_url = sqs.create_queue(QueueName=f"{name}-envelope")["QueueUrl"]
    raw_url = sqs.create_queue(QueueName=f"{name}-raw")["QueueUrl"]
    arn = lambda queue: f"arn:aws:sqs:{REGION}:000000000000:{queue}"
    wrapped = sns.subscribe(
        TopicArn=topic, Protocol="sqs", Endpoint=arn(f"{name}-envelope"), ReturnSubscriptionArn=True
    )["SubscriptionArn"]
    step("sns subscribe", wrapped.startswith(topic + ":"), wrapped)
    raw = sns.subscribe(
        TopicArn=topic,
        Protocol="sqs",
        Endpoint=arn(f"{name}-raw"),
        Attributes={"RawMessageDelivery": "true", "FilterPolicy": json.dumps({"kind": ["card"]})},
    )["SubscriptionArn"]
    attributes = sns.get_subscription_attributes(SubscriptionArn=raw)["Attributes"]
    step("sns get_subscription_attributes", attributes["RawMessageDelivery"] == "true", attributes)
    published = sns.publish(
        TopicArn=topic,
        Subject="hello",
        Message="card payment",
        MessageAttributes={"kind": {"DataType": "String", "StringValue": "card"}},
    )
    sns.publish(
        TopicArn=topic,
        Message="cash payment",
        MessageAttributes={"kind": {"DataType": "String", "StringValue": "cash"}},
    )
    batch = sns.publish_batch(
        TopicArn=topic,
        PublishBatchRequestEntries=[
            {"Id": "a", "Message": "batched", "MessageAttributes": {"kind": {"DataType": "String", "StringValue": "card"}}},
            {"Id": "b", "Message": "bad subject", "Subject": "\nno"},
        ],
    )
    step(
        "sns publish_batch answers each entry",
        [entry["Id"] for entry in batch["Successful"]] == ["a"]
        and [entry["Code"] for entry in batch["Failed"]] == ["InvalidParameter"],
        batch,
    )
    envelopes = receive_all(sqs, envelope_url, 3)
    first = json.loads(sorted(envelopes, key=lambda message: message["Body"])[0]["Body"])
    bodies = sorted(json.loads(message["Body"])["Message"] for message in envelopes)
    step("sns envelope delivery", bodies == ["batched", "card payment", "cash payment"], bodies)
    by_id = {json.loads(message["Body"])["MessageId"]: json.loads(message["Body"]) for message in envelopes}
    step(
        "sns envelope carries the publish's id and subject",
        by_id.get(published["MessageId"], {}).get("Subject") == "hello",
        first,
    )
    raws = sorted(message["Body"] for message in receive_all(sqs, raw_url, 2, MessageAttributeNames=["All"]))
    step("sns raw delivery with a filter policy", raws == ["batched", "card payment"], raws)
    listed = [subscription["SubscriptionArn"] for subscription in sns.list_subscriptions_by_topic(TopicArn=topic)["Subscriptions"]]
    step("sns list_subscriptions_by_topic", sorted(listed) == sorted([wrapped, raw]), listed)
    topics = [entry["TopicArn"] for entry in sns.list_topics()["Topics"]]
    step("sns list_topics", topic in topics, topics)
    step(
        "sns get_topic_attributes",
        sns.get_topic_attributes(TopicArn=topic)["Attributes"]["SubscriptionsConfirmed"] == "2",
    )
    # Archive and replay as SNS does them (SNS: FIFO topics only; ackbox
    # archives standard topics too).
    sns.set_topic_attributes(
        TopicArn=topic,
        AttributeName="ArchivePolicy",
        AttributeValue=json.dumps({"MessageRetentionPeriod": "1"}),
    )
    archived = sns.get_topic_attributes(TopicArn=topic)["Attributes"]
    step("sns set_topic_attributes ArchivePolicy", "BeginningArchiveTime" in archived, archived)
    sns.publish(
        TopicArn=topic,
        Message="archived card",
        MessageAttributes={"kind": {"DataType": "String", "StringValue": "card"}},
    )
    first = [message["Body"] for message in receive_all(sqs, raw_url, 1)]
    step("sns an archived publish is delivered", first == ["archived card"], first)
    sns.set_subscription_attributes(
        SubscriptionArn=raw,
        AttributeName="ReplayPolicy",
        AttributeValue=json.dumps({"PointType": "Timestamp", "StartingPoint": "2000-01-01T00:00:00.000Z"}),
    )
    status = None
    for _ in range(100):
        status = sns.get_subscription_attributes(SubscriptionArn=raw)["Attributes"].get("ReplayStatus")
        if status == "Completed":
            break
        time.sleep(0.1)
    step("sns ReplayPolicy replays to the subscription", status == "Completed", status)
    replayed = receive_all(sqs, raw_url, 1, MessageAttributeNames=["All"])
    marks = [
        (message["Body"], message.get("MessageAttributes", {}).get("ackbox.replay", {}).get("StringValue"))
        for message in replayed
    ]
    step("sns a replayed copy is the archived publish, marked", marks == [("archived card", "true")], marks)
    sns.unsubscribe(SubscriptionArn=raw)
    sns.delete_topic(TopicArn=topic)
    try:
        sns.publish(TopicArn=topic, Message="gone")
        step("sns publish to a deleted topic is refused", False)
    except ClientError as error:
        code = error.response["Error"]["Code"]
        step("sns publish to a deleted topic is NotFound", code == "NotFound", code)
    for queue in (envelope_url, raw_url):
        sqs.delete_queue(QueueUrl=queue)


def awscli_sns_scenario():
    name = f"matrix-cli-sns-{uuid.uuid4().hex[:8]}"
    topic = aws_sns("create-topic", "--name", name)["TopicArn"]
    step("aws sns create-topic", topic.endswith(f":{name}"), topic)
    url = aws("create-queue", "--queue-name", f"{name}-q")["QueueUrl"]
    subscription = aws_sns(
        "subscribe",
        "--topic-arn",
        topic,
        "--protocol",
        "sqs",
        "--notification-endpoint",
        f"arn:aws:sqs:{REGION}:000000000000:{name}-q",
        "--attributes",
        "RawMessageDelivery=true",
    ).get("SubscriptionArn", "")
    step("aws sns subscribe", subscription.startswith(topic + ":"), subscription)
    published = aws_sns("publish", "--topic-arn", topic, "--message", "from the cli")
    step("aws sns publish", "MessageId" in published, published)
    received = aws("receive-message", "--queue-url", url, "--wait-time-seconds", "1")
    bodies = [message["Body"] for message in received.get("Messages", [])]
    step("aws sns publish reaches the queue", bodies == ["from the cli"], received)
    topics = [entry["TopicArn"] for entry in aws_sns("list-topics").get("Topics", [])]
    step("aws sns list-topics", topic in topics, topics)
    step(
        "aws sns set-topic-attributes",
        aws_sns(
            "set-topic-attributes", "--topic-arn", topic,
            "--attribute-name", "DisplayName", "--attribute-value", "Cli",
        ) == {},
    )
    attributes = aws_sns("get-topic-attributes", "--topic-arn", topic).get("Attributes", {})
    step("aws sns get-topic-attributes", attributes.get("DisplayName") == "Cli", attributes)
    listed = aws_sns("list-subscriptions-by-topic", "--topic-arn", topic).get("Subscriptions", [])
    step("aws sns list-subscriptions-by-topic", [entry["SubscriptionArn"] for entry in listed] == [subscription], listed)
    step(
        "aws sns tag-resource",
        aws_sns("tag-resource", "--resource-arn", topic, "--tags", "Key=team,Value=payments") == {},
    )
    tags = aws_sns("list-tags-for-resource", "--resource-arn", topic).get("Tags", [])
    step("aws sns list-tags-for-resource", tags == [{"Key": "team", "Value": "payments"}], tags)
    step(
        "aws sns set-topic-attributes ArchivePolicy",
        aws_sns(
            "set-topic-attributes", "--topic-arn", topic,
            "--attribute-name", "ArchivePolicy", "--attribute-value", '{"MessageRetentionPeriod":"2"}',
        ) == {},
    )
    aws_sns("publish", "--topic-arn", topic, "--message", "archived from the cli")
    aws("receive-message", "--queue-url", url, "--wait-time-seconds", "1")
    step(
        "aws sns set-subscription-attributes ReplayPolicy",
        aws_sns(
            "set-subscription-attributes", "--subscription-arn", subscription,
            "--attribute-name", "ReplayPolicy",
            "--attribute-value", '{"PointType":"Timestamp","StartingPoint":"2000-01-01T00:00:00Z"}',
        ) == {},
    )
    replayed = aws("receive-message", "--queue-url", url, "--wait-time-seconds", "5")
    bodies = [message["Body"] for message in replayed.get("Messages", [])]
    step("aws sns a replay delivers the archived publish again", bodies == ["archived from the cli"], replayed)
    step("aws sns unsubscribe", aws_sns("unsubscribe", "--subscription-arn", subscription) == {})
    step("aws sns delete-topic", aws_sns("delete-topic", "--topic-arn", topic) == {})
    missing = aws_sns("get-topic-attributes", "--topic-arn", topic)
    step("aws sns get-topic-attributes on a deleted topic fails", "NotFound" in missing.get("error", ""), missing)
    aws("delete-queue", "--queue-url", url)


def main():
    client = sys.argv[1] if len(sys.argv) > 1 else ""
    started = time.monotonic()
    if client == "boto3":
        sdk_scenario(sdk_client("json"), "boto3")
    elif client == "botocore-query":
        sdk_scenario(sdk_client("query"), "query")
    elif client == "awscli":
        awscli_scenario()
    elif client == "boto3-sns":
        sns_scenario()
    elif client == "awscli-sns":
        awscli_sns_scenario()
    else:
        sys.exit("usage: matrix.py boto3 | botocore-query | awscli | boto3-sns | awscli-sns")
    print(f"passed: {client} (botocore {botocore.__version__}) in {time.monotonic() - started:.1f}s")


if __name__ == "__main__":
    main()
