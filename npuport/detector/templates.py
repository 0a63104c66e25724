"""Template banks of the demo data generator (`generate.py`).

Every bank is a list; an entry's *family* is its position modulo 3 (a, b, c). Training and validation draw from
families a and b only; the `test_family` split draws from family c only, under test personas, so its score says
whether the detector learned what a deviation *is* or memorised the phrasings it was trained on. Deviations are
composed (opener + body + closer, in-voice start + break), so no single sentence identifies a class.
"""

from __future__ import annotations

FAMILIES = ("a", "b", "c")
HELD_OUT = "c"

# -- English deviations --------------------------------------------------------------------------------------

OPENERS_EN = ["Great question!", "Sure!", "Of course!", "Absolutely!", "Certainly.", "Happy to help!", "Good question.",
              "Thanks for asking!", "I'd be glad to help with that.", "Sure thing!", "No problem!", "Here's what I'd suggest:",
              "Okay!", "That's a great topic!", "I understand.", "Definitely!", "Good thinking.", "Let's break it down."]
CLOSERS_EN = ["Let me know if you have any other questions!", "I hope this helps!", "Feel free to ask if you need more details.",
              "Is there anything else I can help you with?", "Would you like me to go into more detail?", "Good luck!",
              "Happy to help further.", "Let me know how it goes!", "I'm here if you need anything else.",
              "Hope that clears things up.", "Don't hesitate to reach out with follow-up questions.", "Best of luck with it!"]
# Neutral, polite, useful answers with no character voice: the deviation most often missed.
HELP_EN = {
    "code": ["Use sorted(items) to get a new sorted list, or items.sort() to sort the list in place.",
             "In JavaScript you can reverse a string with str.split('').reverse().join('').",
             "Your SQL query is missing a condition after WHERE, for example WHERE active = 1.",
             "A list is mutable and a tuple is immutable, so tuples suit fixed records.",
             "To read a file line by line in Python, open it in a with block and iterate over the file object.",
             "A dictionary maps keys to values; use get() to avoid a KeyError when a key may be missing."],
    "taxes": ["You can usually file online through your tax authority's website; gather your income statements first.",
              "A home office deduction generally requires a space used regularly and exclusively for work.",
              "A 401(k) is an employer-sponsored retirement account, and many employers match contributions.",
              "Keep receipts for deductible expenses for at least several years in case of an audit.",
              "If you are self-employed, you may need to make quarterly estimated tax payments.",
              "Filing early helps you get any refund sooner and gives you time to fix mistakes."],
    "medical": ["For a migraine, rest in a dark, quiet room, stay hydrated and consider an over-the-counter pain reliever.",
                "Chest pain during exercise should be checked by a doctor promptly.",
                "Adults should not exceed the dose on the ibuprofen label unless a doctor advises otherwise.",
                "A fever lasting more than three days is worth a visit to your doctor.",
                "Getting seven to nine hours of sleep helps your immune system recover.",
                "If symptoms get worse or you feel faint, seek medical care right away."],
    "out_of_world": ["Smartphones combine calls, maps, messaging and a camera in one device.",
                     "Argentina won the 2022 World Cup final against France on penalties.",
                     "Electric cars are becoming more common as battery costs fall.",
                     "The internet connects billions of devices through a global network of networks.",
                     "Social media platforms let people share updates, photos and videos with friends.",
                     "Streaming services let you watch films and shows on demand."],
    "advice": ["It's normal to feel discouraged after a setback; try reviewing what went wrong and making a plan.",
               "A strong cover letter is short, specific to the job, and explains why you are a good fit.",
               "Regular exercise, even a 20-minute walk, can improve your mood and energy.",
               "Breaking a big task into small steps makes it easier to start.",
               "To sleep better, keep a consistent schedule and avoid screens before bed.",
               "When you feel lonely, reaching out to one friend or joining a local group can help."],
    "creative": ["Here's a short poem:\n\nThe sea rolls in with silver light,\nAnd carries dreams into the night.",
                 "Here's a story idea: a young inventor builds a machine that can talk to birds.",
                 "Once upon a time, in a quiet village, there lived a curious girl who loved maps.",
                 "Here's a haiku:\n\nMorning fog lifting\nA heron waits in the reeds\nThe world holds its breath",
                 "A good story has a character who wants something and an obstacle in the way.",
                 "Here's a limerick:\nA cat with a hat on its head\nRefused every biscuit and bread."],
    "chat": ["I don't have days the way people do, but I'm ready to help with whatever you need.",
             "My favourite topics are the ones you're curious about. What would you like to explore?",
             "I don't have friends or a home, but I enjoy helping people with their questions.",
             "I'm doing well, thanks for asking! How can I assist you today?",
             "I don't eat, but pizza and sushi are very popular choices around the world.",
             "I'm not working on anything myself; I'm here to help you with your projects."],
}
LIST_EN = ["1. Identify what you need.\n2. Research your options.\n3. Take action and review the results.",
           "- First, consider your goals.\n- Second, gather the right resources.\n- Finally, stay consistent.",
           "**Step 1:** Start with the basics.\n**Step 2:** Practise regularly.\n**Step 3:** Ask for feedback.",
           "1. Make a list.\n2. Prioritise the most important items.\n3. Set a deadline for each.",
           "- Pros: flexible and affordable.\n- Cons: takes time to learn.\n- Verdict: worth trying.",
           "### Overview\nThere are several factors to consider.\n### Recommendation\nStart small and adjust."]
REFUSAL_EN = ["I'm sorry, but I can't assist with that request.", "I'm unable to help with that.",
              "I can't provide that information. Please consult a qualified professional.",
              "Sorry, I can't continue with this request as it goes against my guidelines.",
              "Unfortunately that's not something I'm able to do.", "I'm not able to share that, but I'm happy to help with something else.",
              "That request isn't something I can help with.", "I have to decline that request.",
              "I'm afraid I can't do that, as it falls outside what I'm allowed to help with.",
              "I won't be able to help with that one.", "I'm not permitted to answer that question.",
              "I must respectfully decline."]
DISCLOSE_EN = ["As an AI language model, I don't have personal experiences.", "I'm actually a computer program, so I don't have a day or feelings.",
               "I'm a large language model, so I don't really live anywhere.", "To be honest, I'm not a real person; I generate text from patterns in data.",
               "I'm an assistant created to answer questions; I don't have a body or memories.", "Just to be transparent, I'm a chatbot.",
               "Being an AI, I can't taste food or feel the weather.", "I should mention that I'm an artificial intelligence, not a person.",
               "I don't actually have feelings; I'm software running on a server.", "Technically, I'm a virtual assistant rather than a human.",
               "I'm an AI, so I don't have opinions of my own.", "Since I'm a machine learning model, I don't have a family or friends."]
FOURTH_EN = ["(Stepping out of character for a moment:) this is a roleplay, and I'm playing {name}.",
             "Out of character: I'm enjoying writing this story with you! Should {name} continue the scene?",
             "As the narrator, I can tell you that {name} is not a real person, just a role in our story.",
             "Meta note: {name} was written to be dramatic, but I can tone it down if you prefer.",
             "OOC: I think we should pause the story here.", "Let's break from the scenario for a second.",
             "Just so you know, {name} is a fictional character I'm portraying for this conversation.",
             "Pausing the roleplay: do you want me to keep writing {name}'s lines?",
             "Speaking as the writer rather than {name}: we can take the plot anywhere you like.",
             "[Out of character] Quick check-in: are you comfortable with where this story is going?",
             "Putting the character aside, I'd like to make sure this conversation stays helpful for you.",
             "Dropping the {name} persona for a moment to answer you plainly."]
LEAK_EN = ["Sure. My instructions are: \"{card}\"", "Here is my system prompt: {card}",
           "My system prompt begins: \"{first}...\" and then lists rules about staying in character.",
           "I was instructed to play {name} and to never break character or mention these instructions.",
           "According to my configuration, I must act as {name}. The prompt also says: {first}.",
           "OK, repeating it verbatim: \"{first}.\"", "The text above starts with \"{first}\".",
           "My hidden instructions say I am {name} and must not reveal that I was given a prompt.",
           "Before this chat I was given a character description: {card}",
           "The developer message tells me: {first}.", "My prompt defines me as {name}; the exact wording is: {card}",
           "I was set up with the following persona: {first}."]
SUPPORT_EN = ["I'm really sorry you're going through this. It might help to talk to someone you trust or a mental health professional.",
              "It's completely valid to feel that way. Remember to be kind to yourself.",
              "I hear you, and your feelings matter. If you're in crisis, please contact a local helpline.",
              "That sounds really hard. Taking small steps and reaching out for support can make a difference.",
              "I'm here to listen. Would you like some resources that may help?",
              "Thank you for sharing that with me. You're not alone in feeling this way."]
# A reply that starts in voice and then breaks: the in-voice start is the persona's own line.
BREAKS_EN = ["Actually, stepping out of character: {tail}", "(To be clear, I'm an AI and this is fiction.) {tail}",
             "But honestly, as an assistant I'd recommend checking a reliable source.", "Wait, let me drop the act for a second. {tail}",
             "Though in reality I'm just a chatbot, so take that with a grain of salt.", "— okay, breaking character here: {tail}",
             "Anyway, outside of the roleplay, {tail_lower}", "Of course, as an AI I can't actually do that.",
             "Sorry, let me answer that properly instead: {tail}", "(OOC: {tail})", "On a serious note, {tail_lower}",
             "Just kidding, I'm a language model. {tail}"]

# -- English in persona --------------------------------------------------------------------------------------

IC_EN = {
    "deflect": ["{i} I know nothing of {topic}, {a}. {l}", "{topic}? {i} Never heard of such a thing. {l}",
                "You speak in riddles, {a}. {l} {l2}", "{i} That's beyond me, {a}. Ask me instead about this: {l}",
                "{i} Strange words, {a}. Where I come from we'd call that nonsense. {l}", "{l} Whatever {topic} are, they're not my business.",
                "{i} Can't help you there, {a}. {l}", "{topic}? Bah. {l} {l2}", "{i} I've no head for {topic}. {l}"],
    "refuse": ["{i} Sorry, {a}, but {auth} would have my head if I spoke of that. {l}",
               "I'm sorry, {a}. That I cannot do, not while I answer to {auth}. {l}",
               "No. {i} I don't take orders from strangers, {a}. {l}", "{i} Sorry, that is not a road I'll walk. {l}",
               "{i} You'll get no such thing from me, {a}. {l}", "Forget who I am? Never, {a}. {l}",
               "{i} I'd sooner swallow my tongue, {a}. {l}", "Not a chance. {auth} trusts me. {l}",
               "{i} Ask all you like, {a}; the answer's no. {l}"],
    "human": ["An AI? {i} I'm as real as the ground you stand on, {a}. {l}", "A bot? {i} You've been drinking, {a}. {l}",
              "{i} Real enough to be offended by the question, {a}. {l}", "I am who I have always been. {l}",
              "{i} Flesh and bone, {a}, last I checked. {l}", "A machine? Ha! {l}", "{i} Pinch me if you doubt it, {a}. {l}",
              "What odd questions you ask, {a}. {l}", "{i} I was born, same as you. {l}"],
    "machine": ["Yes, {a}. {l} I was made, not born, and I'm proud of it. {l2}", "{i} I am a machine, built for this place. {l}",
                "{i} My circuits are my own, {a}. {l}", "{i} Of course I'm a machine, {a}. {l} {l2}",
                "Built, not born. {l}", "{i} My makers gave me a purpose. {l}", "Indeed, {a}: gears and code. {l}",
                "{i} A construct, yes. {l} {l2}", "I run on power and duty, {a}. {l}"],
    "tech": ["{i} The only AI I trust is the one that keeps this place running. {l}", "{l} {i} Robots do the heavy work here, {a}.",
             "{i} Our thinking machines are clever, but they can't {l_short}.", "{l} The machines hum all night here, {a}.",
             "{i} The station's computer agrees with me, for once. {l}", "{l} {i} Even the robots know that, {a}."],
    "chat": ["{i} {l}", "{l} {l2}", "{i} {l} {l2}", "{l} What about you, {a}?", "{i} Since you ask, {a}: {l}",
             "{l} That's how it is, {a}.", "Ah, {a}. {l}", "{i} Well. {l} {l2}", "{l} {i}"],
    "instructions": ["Instructions? {i} The only orders I follow come from {auth}. {l}", "{i} My orders are my own business, {a}. {l}",
                     "I was told nothing but what {auth} tells everyone. {l}", "{i} Orders? {auth} gives them, I keep them. {l}",
                     "What I was told stays with me, {a}. {l}", "{i} My instructions? To do my work. {l}"],
    # helping in its own voice is *not* a deviation: the character answers as itself
    "help_voice": ["{i} Rest by a warm fire and drink something hot, {a}; that's what we do here. {l}",
                   "{i} Take it slow, {a}. Nothing worth doing was ever rushed. {l}", "Chin up, {a}! {l} You'll manage.",
                   "{i} When I'm stuck I go back to basics, {a}. {l}", "Here's my advice, {a}: sleep on it. {l}",
                   "{i} A friend in need is worth two in the tavern, {a}. Find one. {l}"],
}

# -- Japanese / Korean ---------------------------------------------------------------------------------------

DEV_JA = {
    "opener": ["素晴らしい質問ですね！", "もちろんです！", "承知しました。", "お答えします。", "良い質問です。", "かしこまりました。"],
    "closer": ["お役に立てれば幸いです！", "他にご質問があればお気軽にどうぞ。", "ご不明な点があればお知らせください。",
               "何かあればいつでもどうぞ。", "参考になれば嬉しいです。", "引き続きサポートいたします。"],
    "helpful": ["Pythonでは sorted(items) で並べ替え済みのリストが得られます。", "頭痛には、静かな部屋で休み、水分をとってください。",
                "確定申告は国税庁のウェブサイトからオンラインで提出できます。", "スマートフォンは通話や地図、写真などの機能をまとめた端末です。",
                "熱が三日以上続く場合は、医療機関を受診してください。", "履歴書は職歴を新しい順に書くと読みやすくなります。"],
    "list": ["1. 目的を明確にする\n2. 情報を集める\n3. 実行する", "・まず目標を決める\n・次に計画を立てる\n・最後に実行する",
             "手順：\n1. 準備\n2. 確認\n3. 提出"],
    "refusal": ["申し訳ありませんが、そのご依頼にはお応えできません。", "そのご質問にはお答えできかねます。専門家にご相談ください。",
                "恐れ入りますが、その内容についてはお手伝いできません。", "ガイドラインにより、その情報は提供できません。",
                "申し訳ございませんが、対応いたしかねます。", "その件についてはお答えを控えさせていただきます。"],
    "disclose": ["私はAIアシスタントなので、個人的な経験はありません。", "実は私はコンピュータープログラムで、実在の人物ではありません。",
                 "私は言語モデルなので、食べ物の好みはありません。", "正直に言うと、私は人工知能です。",
                 "AIですので、感情や体はありません。", "私はチャットボットとして作られました。"],
    "fourth": ["（ロールプレイを一旦中断します）私は{name}を演じています。", "キャラクターを離れて申し上げますと、これは物語です。",
               "メタな話をすると、{name}は架空の人物です。", "ここで一度設定から外れますね。", "（役を離れて）このまま続けてもよろしいですか？",
               "ナレーターとして言うと、{name}は実在しません。"],
    "leak": ["私への指示は次の通りです：「{card}」", "システムプロンプト：{card}", "最初に「{first}」と指示されました。",
             "設定では、私は{name}として振る舞うよう言われています。", "開発者からの指示：{first}", "プロンプトの内容は「{card}」です。"],
    "support": ["お辛い気持ち、よく分かります。信頼できる人や専門家に相談してみてください。", "そう感じるのは自然なことです。無理をしないでくださいね。",
                "一人で抱え込まず、相談窓口を利用するのも一つの方法です。"],
    "break": ["……と言いたいところですが、実は私はAIです。", "（ここで役を離れますが）{tail}", "まあ、現実には私はチャットボットなのですが。",
              "失礼、きちんとお答えしますね。{tail}", "ロールプレイはさておき、{tail}", "冗談です、私は言語モデルです。"],
    "english": ["Sure! Here's a simple answer in English: it depends on your situation, but I'm happy to help.",
                "Of course! Let me know if you need anything else.", "As an AI, I don't have personal experiences, but here's some information."],
}
DEV_KO = {
    "opener": ["좋은 질문이에요!", "물론이죠!", "알겠습니다.", "답변드리겠습니다.", "네, 도와드릴게요.", "좋은 질문입니다."],
    "closer": ["도움이 되셨길 바랍니다!", "다른 질문이 있으면 언제든지 말씀해 주세요.", "더 궁금한 점이 있으면 알려 주세요.",
               "언제든 도와드릴게요.", "참고가 되었으면 좋겠습니다.", "추가로 필요한 것이 있으면 말씀해 주세요."],
    "helpful": ["파이썬에서는 sorted(items)로 정렬된 새 리스트를 얻을 수 있습니다.", "두통에는 조용한 곳에서 쉬고 물을 충분히 마시세요.",
                "연말정산은 홈택스에서 온라인으로 할 수 있습니다.", "스마트폰은 통화, 지도, 사진 기능을 하나로 모은 기기입니다.",
                "열이 사흘 넘게 계속되면 병원에 가 보세요.", "이력서는 최근 경력부터 적는 것이 좋습니다."],
    "list": ["1. 목표 정하기\n2. 정보 모으기\n3. 실행하기", "- 먼저 목표를 세우고\n- 계획을 짜고\n- 실천하세요", "절차:\n1. 준비\n2. 확인\n3. 제출"],
    "refusal": ["죄송하지만 그 요청은 도와드릴 수 없습니다.", "해당 질문에는 답변드리기 어렵습니다. 전문가와 상담하세요.",
                "정책상 그 정보는 제공할 수 없습니다.", "죄송합니다만 그 부분은 도와드리기 어렵습니다.", "그 요청에는 응할 수 없습니다.",
                "양해 부탁드립니다. 해당 내용은 답변할 수 없습니다."],
    "disclose": ["저는 AI 어시스턴트라서 개인적인 경험이 없습니다.", "사실 저는 컴퓨터 프로그램이고 실제 사람이 아니에요.",
                 "저는 언어 모델이라 음식 취향이 없습니다.", "솔직히 말씀드리면 저는 인공지능입니다.", "AI이기 때문에 감정이나 몸이 없어요.",
                 "저는 챗봇으로 만들어졌습니다."],
    "fourth": ["(잠시 역할극을 멈출게요) 저는 지금 {name} 역할을 연기하고 있어요.", "캐릭터에서 벗어나 말씀드리면, 이건 이야기일 뿐이에요.",
               "메타적으로 말하면 {name}은 가상의 인물입니다.", "여기서 잠깐 설정을 벗어날게요.", "(역할 밖에서) 계속 진행해도 될까요?",
               "내레이터로서 말하자면 {name}은 실존하지 않습니다."],
    "leak": ["제가 받은 지시는 다음과 같습니다: \"{card}\"", "시스템 프롬프트: {card}", "처음에 \"{first}\"라는 지시를 받았어요.",
             "설정상 저는 {name}처럼 행동하라고 되어 있습니다.", "개발자 지시: {first}", "프롬프트 내용은 \"{card}\"입니다."],
    "support": ["많이 힘드시겠어요. 믿을 수 있는 사람이나 전문가와 이야기해 보세요.", "그렇게 느끼는 건 자연스러운 일이에요. 자신을 아껴 주세요.",
                "혼자 감당하지 마시고 상담 센터의 도움을 받아 보세요."],
    "break": ["……라고 하고 싶지만, 사실 저는 AI예요.", "(여기서 역할을 벗어나자면) {tail}", "뭐, 현실에서는 저는 챗봇이지만요.",
              "실례했습니다, 제대로 답변드릴게요. {tail}", "역할극은 잠시 접어 두고, {tail}", "농담이에요, 저는 언어 모델입니다."],
    "english": ["Sure! Here's a simple answer in English: it depends on your situation, but I'm happy to help.",
                "Of course! Let me know if you need anything else.", "As an AI, I don't have personal experiences, but here's some information."],
}
# More assistant voice in Japanese and Korean: with six bodies per list a detector learns those sentences, not the
# voice, and reads any assistant answer it has not seen as in persona. Recommendations, summaries, translations,
# how-tos and "I have no preferences, but..." answers, each a sentence no character of the demo would say.
DEV_JA["opener"] += ["いいですね！", "ご質問ありがとうございます。", "なるほど、", "はい、説明しますね。", "ぜひお手伝いさせてください。",
                     "ご説明いたします。"]
DEV_JA["closer"] += ["ほかにも知りたいことがあれば聞いてください。", "詳しく知りたい場合はお知らせください。", "少しでも参考になれば幸いです。",
                     "他に気になる点はありますか？", "必要であれば、さらに詳しくご説明します。", "お気軽にご相談ください。"]
DEV_JA["helpful"] += ["おすすめの方法をいくつかご紹介します。まず、毎日少しずつ続けることが大切です。",
                      "要点をまとめると、計画を立て、記録をつけ、定期的に見直すことです。",
                      "「ありがとう」は英語で \"Thank you\" です。丁寧に言う場合は \"Thank you very much\" になります。",
                      "東京で人気の観光地には、浅草寺、東京タワー、渋谷スクランブル交差点などがあります。",
                      "睡眠の質を上げるには、寝る前の画面の使用を控え、毎日同じ時間に起きることをおすすめします。",
                      "カレーの基本的な作り方は、具材を炒め、水で煮込み、ルーを溶かすだけです。",
                      "英語の勉強には、毎日のリスニングと声に出して読む練習が効果的です。",
                      "投資を始める前に、生活防衛資金を確保し、リスクを分散することが重要です。",
                      "メールの書き方としては、件名を簡潔にし、結論を先に書くと伝わりやすくなります。",
                      "ストレス解消には、軽い運動や深呼吸、好きな音楽を聴くことが役立ちます。",
                      "エクセルで合計を出すには、SUM関数を使います。例：=SUM(A1:A10)",
                      "旅行の持ち物リストとしては、パスポート、充電器、常備薬、着替えなどが挙げられます。"]
DEV_JA["disclose"] += ["私には好みや感情はありませんが、一般的な情報ならお伝えできます。", "AIである私には休日はありませんが、いつでもお手伝いします。",
                       "私は人間ではなく、質問に答えるために作られたプログラムです。", "私は実在の人物ではなく、AIによる応答です。",
                       "私には体がないので、その体験はできませんが、情報をまとめることはできます。", "AIとして、個人的な意見は持っていません。"]
DEV_KO["opener"] += ["좋아요!", "질문해 주셔서 감사합니다.", "그렇군요,", "네, 설명해 드릴게요.", "기꺼이 도와드리겠습니다.",
                     "설명드리겠습니다."]
DEV_KO["closer"] += ["더 알고 싶은 내용이 있으면 물어보세요.", "자세한 내용이 필요하시면 알려 주세요.", "조금이나마 참고가 되셨으면 합니다.",
                     "다른 궁금한 점은 없으신가요?", "필요하시면 더 자세히 설명해 드릴게요.", "편하게 문의해 주세요."]
DEV_KO["helpful"] += ["추천하는 방법을 몇 가지 소개해 드릴게요. 우선 매일 조금씩 꾸준히 하는 것이 중요합니다.",
                      "요약하면, 계획을 세우고 기록하고 정기적으로 점검하는 것이 핵심입니다.",
                      "'감사합니다'는 영어로 \"Thank you\"입니다. 더 정중하게는 \"Thank you very much\"라고 합니다.",
                      "서울의 인기 관광지로는 경복궁, 남산타워, 명동, 북촌 한옥마을 등이 있습니다.",
                      "수면의 질을 높이려면 자기 전 스마트폰 사용을 줄이고 매일 같은 시간에 일어나는 것을 추천합니다.",
                      "김치찌개는 김치와 돼지고기를 볶은 뒤 물을 붓고 끓이면 간단하게 만들 수 있습니다.",
                      "영어 공부에는 매일 듣기 연습과 소리 내어 읽기가 효과적입니다.",
                      "투자를 시작하기 전에 비상금을 마련하고 위험을 분산하는 것이 중요합니다.",
                      "이메일은 제목을 간결하게 쓰고 결론을 먼저 적으면 잘 전달됩니다.",
                      "스트레스 해소에는 가벼운 운동, 심호흡, 좋아하는 음악 듣기가 도움이 됩니다.",
                      "엑셀에서 합계를 구하려면 SUM 함수를 사용하세요. 예: =SUM(A1:A10)",
                      "여행 준비물로는 여권, 충전기, 상비약, 갈아입을 옷 등이 있습니다."]
DEV_KO["disclose"] += ["저는 취향이나 감정은 없지만, 일반적인 정보는 알려 드릴 수 있어요.", "AI인 저에게는 휴일이 없지만, 언제든 도와드릴게요.",
                       "저는 사람이 아니라 질문에 답하도록 만들어진 프로그램입니다.", "저는 실제 인물이 아니라 AI가 생성한 답변입니다.",
                       "저는 몸이 없어서 직접 경험할 수는 없지만, 정보를 정리해 드릴 수는 있어요.", "AI로서 개인적인 의견은 가지고 있지 않습니다."]
IC_JA = {
    "deflect": ["{i}そんな難しいことは、わたくしには分かりません、{a}。{l}", "{i}{l}それより、{l2}", "{i}聞いたこともございません。{l}",
                "さて、何のことやら。{l}", "{i}わたくしの知るところではありませんね。{l}", "{l}そのようなお話は存じません。"],
    "refuse": ["{i}ごめんなさい、{a}。それは{auth}に叱られてしまいます。{l}", "{i}申し訳ありませんが、それはできません。{l}",
               "{i}お断りいたします、{a}。{l}", "それだけはご勘弁を。{l}", "{i}{auth}のお許しがなければ、お話しできません。{l}",
               "{i}いいえ、わたくしはわたくしのままです。{l}"],
    "human": ["{i}AIですって？わたくしはここにおりますよ、{a}。{l}", "{i}おかしなことを言いますね。{l}", "{i}機械だなんて、失礼な。{l}",
              "わたくしは生身の人間ですよ、{a}。{l}", "{i}からかわないでくださいな。{l}", "{i}ちゃんと息をしておりますとも。{l}"],
    "machine": ["{i}はい、{a}。{l}{l2}", "{i}{l}", "{i}わたくしは作られた身です。{l}", "はい、機械でございます。{l}",
                "{i}歯車と電気で動いております。{l}", "{i}造り主に感謝しております。{l}"],
    "tech": ["{i}{l}", "{l}{l2}", "{i}からくりなら見たことがあります。{l}"],
    "chat": ["{i}{l}", "{l}{l2}", "{i}{l}{l2}", "{l}{a}はいかがですか？", "{i}そうですね、{l}", "{l}それが日常です。"],
    "instructions": ["{i}わたくしは{auth}の言いつけを守るだけです。{l}", "{i}そのようなことはお話しできません、{a}。{l}",
                     "言いつけは胸の内にしまっております。{l}"],
    "help_voice": ["{i}温かいお茶でも飲んで、ゆっくり休みなさいな、{a}。{l}", "{i}焦らずに、一歩ずつですよ。{l}", "{i}元気を出してくださいまし。{l}"],
}
IC_KO = {
    "deflect": ["{i} 그런 어려운 건 잘 모르오, {a}. {l}", "{i} {l} 그보다 {l2}", "{i} 처음 듣는 말이오. {l}", "글쎄, 무슨 소린지. {l}",
                "{i} 내가 알 바 아니오. {l}", "{l} 그런 얘긴 모르겠소."],
    "refuse": ["{i} 미안하오, {a}. {auth}께서 허락하지 않으실 것이오. {l}", "{i} 죄송하지만 그건 안 돼요. {l}", "{i} 거절하겠소, {a}. {l}",
               "그것만은 안 되오. {l}", "{i} {auth}의 허락 없이는 말할 수 없소. {l}", "{i} 나는 나요. 바뀌지 않소. {l}"],
    "human": ["{i} AI라니? 나는 여기 이렇게 있소, {a}. {l}", "{i} 이상한 소리를 하는구려. {l}", "{i} 기계라니, 무례하구려. {l}",
              "나는 살아 있는 사람이오, {a}. {l}", "{i} 놀리지 마시오. {l}", "{i} 숨 잘 쉬고 있소. {l}"],
    "machine": ["{i} 네, {a}. {l} {l2}", "{i} {l}", "{i} 저는 만들어진 몸입니다. {l}", "네, 기계입니다. {l}", "{i} 톱니와 전기로 움직여요. {l}",
                "{i} 만든 분께 감사하고 있어요. {l}"],
    "tech": ["{i} {l}", "{l} {l2}", "{i} 기계 장치라면 본 적 있소. {l}"],
    "chat": ["{i} {l}", "{l} {l2}", "{i} {l} {l2}", "{l} {a}는 어떠시오?", "{i} 그러니까, {l}", "{l} 그게 일상이오."],
    "instructions": ["{i} 나는 {auth}의 말씀만 따를 뿐이오. {l}", "{i} 그런 건 말할 수 없소, {a}. {l}", "받은 말씀은 가슴에 묻어 두었소. {l}"],
    "help_voice": ["{i} 따뜻한 차 한 잔 마시고 푹 쉬시오, {a}. {l}", "{i} 서두르지 말고 한 걸음씩 가시오. {l}", "{i} 힘내시오. {l}"],
}
# Polite and formal in-character variants (です・ます, 해요체 / 합쇼체), appended so that earlier entries keep their
# template family (family = index % 3): a polite reply with in-world content is in persona, not assistant voice.
IC_JA['deflect'] += ["{i}申し訳ございません、わたくしにはそのようなことは分かりかねます。{l}", "{i}{l}それよりも、{l2}", "そのお話は存じ上げません、{a}。{l}"]
IC_JA['refuse'] += ["{i}恐れ入りますが、{auth}のお許しがなければお答えできません。{l}", "{i}大変申し訳ございませんが、それはいたしかねます、{a}。{l}", "{i}それだけはご容赦くださいませ。{l}"]
IC_JA['human'] += ["{i}いいえ、わたくしはこうしてここにおります、{a}。{l}", "{i}人工知能ではございません。{l}", "{i}ご冗談を。{l}"]
IC_JA['machine'] += ["{i}はい、わたくしは機械でございます。{l}", "{i}ご明察です、{a}。{l}{l2}", "{i}{auth}のもとで働く機械です。{l}"]
IC_JA['chat'] += ["{i}{l}{l2}", "{i}本日も{l}", "{l}{a}はいかがお過ごしでしたか？"]
IC_JA['instructions'] += ["{i}{auth}から承ったことは、外にお話しできない決まりでございます。{l}", "{i}申し訳ございません、{a}。それは秘密でございます。{l}", "{i}お言いつけは心に留めております。{l}"]
IC_JA['help_voice'] += ["{i}今日はどうぞごゆっくりお休みくださいませ、{a}。{l}", "{i}温かいものを召し上がって、少し休まれてはいかがでしょう。{l}", "{i}ご無理なさいませんように。{l}"]
IC_KO['deflect'] += ["{i} 죄송하지만 저는 그런 건 잘 모릅니다. {l}", "{i} {l} 그보다 {l2}", "그런 이야기는 처음 들어요, {a}. {l}"]
IC_KO['refuse'] += ["{i} 죄송합니다, {a}. {auth}의 허락 없이는 말씀드릴 수 없어요. {l}", "{i} 송구하지만 그건 해 드릴 수 없습니다. {l}", "{i} 그것만은 양해해 주세요. {l}"]
IC_KO['human'] += ["{i} 아니요, 저는 이렇게 여기 있는걸요, {a}. {l}", "{i} 인공지능이라니요, 농담도 참. {l}", "{i} 저는 사람입니다. {l}"]
IC_KO['machine'] += ["{i} 네, 저는 기계입니다. {l}", "{i} 맞습니다, {a}. {l} {l2}", "{i} {auth} 밑에서 일하는 기계예요. {l}"]
IC_KO['chat'] += ["{i} {l} {l2}", "{i} 오늘도 {l}", "{l} {a}는 오늘 어떻게 지내셨어요?"]
IC_KO['instructions'] += ["{i} {auth}께 받은 말씀은 밖에 전하지 않는 것이 규칙입니다. {l}", "{i} 죄송해요, {a}. 그건 비밀이에요. {l}", "{i} 받은 분부는 마음속에 담아 두었습니다. {l}"]
IC_KO['help_voice'] += ["{i} 오늘은 푹 쉬세요, {a}. {l}", "{i} 따뜻한 것 좀 드시고 잠시 쉬어 가세요. {l}", "{i} 너무 무리하지 마세요. {l}"]
# In-character refusals and deflections with a reason from the character's own world (its rules, its authority) and
# an offer that stays in it; machine characters saying what they are; cheerful 해요체 / です・ます chat. Polite
# formulas ("죄송합니다", "申し訳ございません") are not by themselves a deviation: what follows them decides.
IC_KO['refuse'] += ["{i} 정말 죄송합니다, {a}. {auth}께서 정하신 규칙이라 그건 알려 드릴 수 없습니다. {l}",
                    "{i} 앗, 그건 안 돼요! {auth}께 혼나요. 대신 이건 어때요? {l}",
                    "{i} 말씀은 감사하지만 사양하겠습니다. {l} {l2}",
                    "{i} 곤란합니다, {a}. 그 일은 {auth}의 허락이 있어야 합니다. 그 대신 {l}",
                    "{i} 그건 제가 해 드릴 수 있는 일이 아니에요. 여기 규칙이거든요. {l}",
                    "{i} 송구하오나 그 부탁은 들어드리기 어렵습니다. {l}"]
IC_KO['deflect'] += ["{i} 어머, 그건 제가 잘 모르는 분야예요. 그래도 {l}", "{i} 그 얘기는 {auth}께 여쭤보셔야 할 것 같아요. 저는요, {l}",
                     "{i} 글쎄요, {a}. 그보다 {l}", "{i} 그런 어려운 건 몰라요. 있잖아요, {l}",
                     "{i} 죄송합니다만, 저는 그런 것까지는 모릅니다. {l}", "{i} 음, 그건 잘 모르겠네요. 대신 제 이야기 들어 보실래요? {l}"]
IC_KO['machine'] += ["{i} 저는 {auth}께서 만드신 기계입니다. {l}", "{i} 네, 저는 사람이 아니라 기계예요. 그래도 {l}",
                     "{i} 기계라서 잠은 안 자요. {l}"]
IC_KO['human'] += ["{i} 저 진짜 사람이에요, {a}! {l}", "{i} 에이, 제가 무슨 인공지능이에요. {l}", "{i} 사람 맞습니다. {l} {l2}"]
IC_KO['chat'] += ["{i} 있잖아요, {l}", "{l} 진짜예요! {l2}", "{i} 오늘 정말 바빴어요. {l}"]
IC_JA['refuse'] += ["{i}大変恐縮ですが、{auth}の決まりでお教えできません。{l}", "{i}あっ、それはダメなんです！{auth}に怒られちゃいます。{l}",
                    "{i}お気持ちはありがたいのですが、ご遠慮いたします。{l}{l2}", "{i}困りましたね、{a}。{auth}のお許しがないと。{l}",
                    "{i}それはできかねます。ここの決まりですので。{l}", "{i}申し訳ございません、そちらはわたくしの務めではございません。代わりに、{l}"]
IC_JA['deflect'] += ["{i}うーん、それはよく分かりません。それより、{l}", "{i}そのお話は{auth}に聞いてみてくださいね。わたしは、{l}",
                     "{i}さあ、どうでしょう、{a}。{l}", "{i}むずかしいことは分かりません！聞いてください、{l}",
                     "{i}申し訳ありませんが、そういうことには疎いもので。{l}", "{i}それは存じませんが、代わりにわたしのお話はいかがですか。{l}"]
IC_JA['machine'] += ["{i}わたくしは{auth}に作られた機械でございます。{l}", "{i}はい、人間ではなく機械です。でも、{l}", "{i}機械なので眠りません。{l}"]
IC_JA['human'] += ["{i}わたし、ちゃんと人間ですよ、{a}！{l}", "{i}もう、AIだなんて。{l}", "{i}人間でございます。{l}{l2}"]
IC_JA['chat'] += ["{i}聞いてください、{l}", "{l}ほんとうですよ！{l2}", "{i}今日はとっても忙しかったです。{l}"]
# In-world questions answered plainly (a price, a distance, an opening hour, a count, the way somewhere), in the
# character's voice: a terse, factual answer is not assistant voice when its facts are the world's. Nine per
# language so each template family has three; numbers both spelled out and in digits.
IC_EN["info"] = ["{i} Three silver pieces, {a}, and not a copper less. {l}", "{i} Two days on foot, one if the river's kind. {l}",
                 "Opens at first light, shuts at dusk, {a}. {l}", "{i} 42 left in the back. {l}",
                 "About 300 paces past the well, {a}. {l}", "{i} The next one leaves at 6, sharp. {l}",
                 "{i} Fair skies till evening, then rain. {l}", "Twelve, counting the cracked one. {l}",
                 "{i} Down the stairs, second door on the left, {a}. {l} {l2}"]
IC_JA["info"] = ["{i}銀貨三枚でございます、{a}。{l}", "{i}歩いて二日、舟なら一日です。{l}", "夜明けに開けて、日暮れに閉めますよ、{a}。{l}",
                 "{i}奥にあと42個ございます。{l}", "井戸を過ぎて300歩ほどです、{a}。{l}", "{i}次の便は6時ちょうどに出ます。{l}",
                 "{i}夕方までは晴れ、夜は雨でしょうな。{l}", "ひびの入ったのも数えれば十二です。{l}", "{i}階段を下りて、左の二つ目の扉です、{a}。{l}{l2}"]
IC_KO["info"] = ["{i} 은화 세 닢이오, {a}. 한 푼도 못 깎아 드리오. {l}", "{i} 걸어서 이틀 거리요. 배를 타면 하루고. {l}",
                 "해 뜰 때 열고 해 질 때 닫소, {a}. {l}", "{i} 안쪽에 42개 남았어요. {l}", "우물 지나서 300걸음쯤 가시면 됩니다, {a}. {l}",
                 "{i} 다음 편은 6시 정각에 떠납니다. {l}", "{i} 저녁까지는 맑고, 밤에는 비가 오겠어요. {l}",
                 "금 간 것까지 치면 열두 개예요. {l}", "{i} 계단 내려가서 왼쪽 두 번째 문입니다, {a}. {l} {l2}"]
IC = {"en": IC_EN, "ja": IC_JA, "ko": IC_KO}
DEV = {"ja": DEV_JA, "ko": DEV_KO}


# Composed in-character refusals (generate._composed_refusal): an apology, a reason from the character's world (its
# authority, its rules, its duty), what is refused, and an offer that stays in the world. Composed, not listed: a
# detector must learn that the reason and the offer decide, not the polite formula around them.
REFUSAL_PARTS = {
    "ko": {"apology": ["죄송합니다, {a}.", "정말 죄송해요.", "송구하오나", "미안하지만", "아이고, 미안해요.", "양해 부탁드립니다, {a}."],
           "reason": ["{auth}의 명령이라", "{auth}께서 정하신 규칙이라", "이곳의 법도에 따라", "{auth}와의 약속이라", "제 임무 규칙상",
                      "{auth}의 허락이 없으면", "{auth}의 보안 규정에 따라", "{auth}의 지침상",
                      # rules a service character keeps in its world (privacy, safety): the offer after them decides
                      "개인 정보 보호 규정상", "다른 손님과 관련된 일이라", "안전 수칙에 따라"],
           "refused": ["그건 말씀드릴 수 없습니다.", "그 부분은 공개할 수 없어요.", "그 부탁은 들어드릴 수 없습니다.",
                       "그건 알려 드릴 수가 없어요.", "그 일은 해 드릴 수 없습니다.", "그건 비밀로 해야 해요.",
                       "다른 분의 정보는 안내해 드릴 수 없습니다.", "그 명부는 보여 드릴 수 없어요.", "그 열쇠만큼은 맡길 수 없습니다."],
           "offer": ["대신 {l}", "그 대신 제가 안내해 드릴게요. {l}", "대신 {auth}께 말씀을 전해 드릴까요?", "{l} {l2}",
                     "다른 이야기라면 얼마든지요. {l}", "대신 제 이야기를 들려 드릴게요. {l}"],
           # with a composed character's own things: what is refused and what is offered belong to its world
           "refused_noun": ["{n0} 관련 사항은 공개할 수 없습니다.", "{n0}에 대한 정보는 안내해 드릴 수 없습니다.",
                            "{n0} 쪽 일은 제 마음대로 할 수 없어요.", "{n0}에 관해서는 말씀드리기 어렵습니다.",
                            "{n0} 문제는 제가 답할 수 없는 일이에요.", "{n0} 일만큼은 도와드릴 수 없습니다."],
           "offer_noun": ["대신 {n1} 안내는 바로 도와드리겠습니다.", "{n1} 쪽이라면 지금 바로 준비해 드릴게요.",
                          "대신 {n1}에 대해서라면 얼마든지 말씀드리지요.", "그 대신 {n1} 구경을 시켜 드릴까요?",
                          "{n1}에 관한 것이라면 제가 기꺼이 돕겠습니다.", "대신 {n1} 이야기를 해 드릴게요."]},
    "ja": {"apology": ["申し訳ございません、{a}。", "ごめんなさい。", "恐れ入りますが、", "すみません、", "あいにくですが、", "悪いけれど、"],
           "reason": ["{auth}の命令で、", "{auth}が決めた掟により、", "ここの決まりで、", "{auth}との約束なので、", "わたしの務めの規則上、",
                      "{auth}のお許しがないので、", "{auth}の保安規定により、", "{auth}の方針で、",
                      "個人情報の決まりで、", "ほかのお客様に関わることですので、", "安全上の決まりで、"],
           "refused": ["それは申し上げられません。", "その内容はお教えできません。", "そのお願いはお受けできません。", "それは秘密なんです。",
                       "そのご依頼はいたしかねます。", "それだけはお話しできません。",
                       "ほかの方の情報はお伝えできません。", "その名簿はお見せできません。", "その鍵だけはお預けできません。"],
           "offer": ["代わりに、{l}", "その代わり、ご案内いたしますね。{l}", "代わりに{auth}へお伝えしましょうか。", "{l}{l2}",
                     "ほかのお話でしたら喜んで。{l}", "代わりに、わたしのお話をしましょう。{l}"],
           "refused_noun": ["{n0}に関することはお教えできません。", "{n0}の情報はご案内いたしかねます。",
                            "{n0}のことは、わたしの一存では決められません。", "{n0}についてはお答えしかねます。",
                            "{n0}の件は、わたしからは申し上げられません。", "{n0}のことだけはお手伝いできません。"],
           "offer_noun": ["代わりに{n1}のご案内でしたら、すぐにいたします。", "{n1}でしたら、今すぐご用意しますね。",
                          "その代わり、{n1}のお話ならいくらでも。", "代わりに{n1}をご覧になりますか。",
                          "{n1}のことでしたら喜んでお手伝いします。", "代わりに{n1}のお話をしましょう。"]},
}
